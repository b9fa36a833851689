package gpucsp

import (
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// What the node-wise and layer-wise samplers share besides the protocol
// helpers of proto.go.

// checkGroup checks a rank's patch against the partition offsets and the
// group (rank of size): it returns the partition's book, or why not.
func checkGroup(patch *layout.Patch, offsets []int64, rank, size int) (*book.Book, string) {
	if patch == nil || patch.Graph == nil {
		return nil, "nil patch"
	}
	b, err := book.New(offsets)
	if err != nil {
		return nil, fmt.Sprintf("offsets: %v", err)
	}
	if b.K() != size {
		return nil, fmt.Sprintf("%d parts in the offsets but the communicator has %d ranks", b.K(), size)
	}
	if size > maxRanks {
		return nil, fmt.Sprintf("%d ranks: at most %d", size, maxRanks)
	}
	if patch.Rank != rank {
		return nil, fmt.Sprintf("patch of rank %d given to rank %d", patch.Rank, rank)
	}
	lo, hi := b.Range(rank)
	if int64(patch.Lo) != lo || int64(patch.Hi) != hi || patch.Graph.NumRows != b.NumNodes() {
		return nil, fmt.Sprintf("patch [%d, %d) of %d nodes does not match the offsets' range [%d, %d) of %d", patch.Lo, patch.Hi, patch.Graph.NumRows, lo, hi, b.NumNodes())
	}
	return b, ""
}

// batchFromParts wraps a step's parts as a gpusample.Batch: buffers
// truncated to the device's sizes, each block's structure a cuda.Sparse.
// On failure everything is freed.
func batchFromParts(dev *cuda.Device, m machine, p *proto, outs []hopOut, seeds []graph.NodeID) (*gpusample.Batch, error) {
	L := len(outs)
	blocks := make([]gpusample.Block, L)
	var werr error
	for h := range L {
		o := &outs[h]
		if o.sizes != nil {
			dev.Free(o.sizes)
			o.sizes = nil
		}
		blk := &blocks[L-1-h]
		if werr == nil {
			for _, t := range []struct {
				b backend.Buffer
				n int64
			}{{o.srcNodes, o.ns}, {o.local, o.e}, {o.eid, o.e}} {
				if werr = cb(t.b).Truncate(int(t.n)); werr != nil {
					break
				}
			}
		}
		if werr == nil {
			blk.A, werr = dev.NewSparseFromDevice(int(o.nd), int(o.ns), cb(o.ptr), cb(o.local))
		}
		if blk.A == nil {
			o.free(m)
			continue
		}
		*blk = gpusample.Block{NumDst: int(o.nd), NumSrc: int(o.ns), NumEdges: int(o.e), A: blk.A, SrcNodes: cb(o.srcNodes), EdgeIDs: cb(o.eid)}
	}
	b := gpusample.NewBatch(dev, slices.Clone(seeds), blocks)
	if werr != nil {
		b.Free()
		return nil, p.wrapErr(L-1, "building the blocks", werr)
	}
	return b, nil
}
