package cudadsp

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Target exclusion on the GPU (exclude.cu): link prediction removes a
// step's target links from the sampled blocks (package link's
// ExcludeTargets, the CPU half, which host batches go through). Here the
// batch stays on the device where it was sampled, so that it travels on
// as node classification's batches do: features gathered by device IDs,
// transposes built on the loader's stream, blocks aliased by the
// trainer. Without it the engine downloaded every batch (tens of MB),
// edited it on the host and uploaded it again on the trainer's stream.

//go:embed exclude.cu
var excludeSrc string

var excludeKernels = []string{"lx_count", "lx_write"}

// excludeDevice is what the exclusion needs of a back end: its kernels
// and queue, CSR matrices built from its buffers, pinned memory and
// fences for the kept edge counts (the CUDA back end).
type excludeDevice interface {
	gpuDevice
	backend.SparseBuilder
	backend.PinnedMemory
	backend.Fences
}

// PairExcluder removes the edges that join target pairs from batches
// sampled on one GPU handle (Batch.Exclude). It is used by one goroutine
// at a time (a sampler worker's).
type PairExcluder struct {
	dev   excludeDevice
	fns   map[string]backend.Kernel
	pin   backend.HostBuffer // the kept edges of each block
	fence backend.Fence
}

// NewPairExcluder is the exclusion on dev, the handle that samples the
// batches it edits; nil and no error when dev is no GPU with the
// capabilities (the caller then edits batches on the host).
func NewPairExcluder(dev backend.Backend) (*PairExcluder, error) {
	d, ok := dev.(excludeDevice)
	if !ok {
		return nil, nil
	}
	x := &PairExcluder{dev: d, fns: map[string]backend.Kernel{}}
	mod, err := d.LoadKernels("exclude", excludeSrc)
	if err != nil {
		return nil, fmt.Errorf("cudadsp: exclusion kernels: %w", err)
	}
	for _, name := range excludeKernels {
		if x.fns[name], err = mod.Kernel(name); err != nil {
			return nil, err
		}
	}
	if x.fence, err = d.NewFence(); err != nil {
		return nil, err
	}
	return x, nil
}

// Close releases the excluder's pinned buffer and fence.
func (x *PairExcluder) Close() error {
	if x == nil {
		return nil
	}
	var errs []error
	if x.pin != nil {
		errs = append(errs, x.pin.Free())
		x.pin = nil
	}
	if x.fence != nil {
		errs = append(errs, x.fence.Close())
		x.fence = nil
	}
	return errors.Join(errs...)
}

// Exclude removes from every block of g the edges from a source node v
// into a destination node u whose key u<<32 | v (uint32s) is in keys
// (sorted, distinct: both directions of every target pair, link's
// TargetKeys), keeping the other edges in their order, and returns the
// number removed: the blocks of link's ExcludeTargets on the downloaded
// batch, edge for edge. The block's nodes do not change. g must have
// been sampled on the excluder's handle, and not prepared
// (PrepareBackward) or handed to nn yet. It waits for the device once,
// for the kept edge counts.
func (x *PairExcluder) Exclude(g *Batch, keys []uint64) (int64, error) {
	if g == nil || g.b == nil {
		return 0, fmt.Errorf("cudadsp: exclusion from a nil batch")
	}
	if g.dev != backend.Backend(x.dev) {
		return 0, fmt.Errorf("cudadsp: exclusion on %s of a batch sampled on another handle", x.dev.Name())
	}
	if g.prep != nil {
		return 0, fmt.Errorf("cudadsp: exclusion from a batch whose transposes are built")
	}
	if len(keys) == 0 {
		return 0, nil
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] <= keys[i-1] {
			return 0, fmt.Errorf("cudadsp: exclusion keys not sorted and distinct at %d", i)
		}
	}
	blocks := g.b.Blocks
	nb := len(blocks)
	if x.pin == nil || len(x.pin.Int64s()) < nb {
		if x.pin != nil {
			x.pin.Free()
			x.pin = nil
		}
		var err error
		if x.pin, err = x.dev.AllocPinned(uint64(8*max(nb, 8)), false); err != nil {
			return 0, err
		}
	}
	// Per block: the kept row pointers (cnt, scanned in place) and the
	// kept edges' local sources and edge IDs, sized for every edge.
	nptr := make([]backend.Buffer, nb)
	nidx := make([]backend.Buffer, nb)
	neid := make([]backend.Buffer, nb)
	var kb backend.Buffer
	freeAll := func(bufs []backend.Buffer) {
		for _, b := range bufs {
			if b != nil {
				x.dev.Free(b)
			}
		}
	}
	fail := func(err error) (int64, error) {
		freeAll(nptr)
		freeAll(nidx)
		freeAll(neid)
		return 0, err
	}
	err := x.dev.Enqueue(func(q backend.Queue) error {
		var err error
		if kb, err = q.AllocRaw(backend.Int64, len(keys)); err != nil {
			return err
		}
		keyWords := make([]int64, len(keys))
		for i, k := range keys {
			keyWords[i] = int64(k)
		}
		if err := q.UploadFrom(kb, keyWords); err != nil {
			return err
		}
		for i := range blocks {
			k := &blocks[i]
			if k.A == nil {
				return fmt.Errorf("block %d was handed to nn", i)
			}
			c, ok := k.A.(backend.CSRBuffers)
			if !ok {
				return fmt.Errorf("block %d: a %T matrix has no CSR buffers", i, k.A)
			}
			ip, ix := c.CSR()
			var err error
			nd := int64(k.NumDst)
			if nptr[i], err = q.AllocRaw(backend.Int64, k.NumDst+1); err != nil {
				return err
			}
			if nidx[i], err = q.AllocRaw(backend.Int32, max(k.NumEdges, 1)); err != nil {
				return err
			}
			if k.EdgeIDs != nil {
				if neid[i], err = q.AllocRaw(backend.Int64, max(k.NumEdges, 1)); err != nil {
					return err
				}
			}
			nk := backend.I64(int64(len(keys)))
			if err := q.Launch(x.fns["lx_count"], nd+1, backend.Buf(nptr[i]), backend.Buf(ip), backend.Buf(ix), backend.Buf(k.SrcNodes),
				backend.I64(nd), backend.Buf(kb), nk); err != nil {
				return err
			}
			if err := q.ScanI64(nptr[i], nptr[i], k.NumDst+1); err != nil {
				return err
			}
			if err := q.Launch(x.fns["lx_write"], nd, backend.Buf(nidx[i]), backend.Buf(neid[i]), backend.Buf(nptr[i]), backend.Buf(ip),
				backend.Buf(ix), backend.Buf(k.EdgeIDs), backend.Buf(k.SrcNodes), backend.I64(nd), backend.Buf(kb), nk); err != nil {
				return err
			}
			last, err := backend.View(nptr[i], k.NumDst, 1)
			if err != nil {
				return err
			}
			if err := q.CopyToHost(x.pin, uint64(8*i), last, 8); err != nil {
				return err
			}
		}
		if err := q.Mark(x.fence); err != nil {
			return err
		}
		q.Free(kb) // the queue runs in order: the kernels read it first
		kb = nil
		return nil
	})
	if kb != nil {
		x.dev.Free(kb)
	}
	if err != nil {
		return fail(err)
	}
	if err := x.fence.Wait(); err != nil {
		return fail(err)
	}
	kept := x.pin.Int64s()[:nb]
	for i := range blocks {
		if kept[i] < 0 || kept[i] > int64(blocks[i].NumEdges) {
			return fail(fmt.Errorf("cudadsp: block %d keeps %d of %d edges", i, kept[i], blocks[i].NumEdges))
		}
		if err := backend.Truncate(nidx[i], int(kept[i])); err != nil {
			return fail(err)
		}
		if neid[i] != nil {
			if err := backend.Truncate(neid[i], int(kept[i])); err != nil {
				return fail(err)
			}
		}
	}
	// Swap the blocks' matrices and edge IDs for the kept ones.
	var removed int64
	for i := range blocks {
		k := &blocks[i]
		a, err := x.dev.SparseFromBuffers(k.NumDst, k.NumSrc, nptr[i], nidx[i])
		if err != nil {
			// Blocks before i are swapped already: the batch is whole
			// (some blocks edited), and freed by the caller.
			freeAll(nptr[i:])
			freeAll(nidx[i:])
			freeAll(neid[i:])
			return removed, err
		}
		x.dev.FreeSparse(k.A)
		if k.EdgeIDs != nil {
			x.dev.Free(k.EdgeIDs)
		}
		removed += int64(k.NumEdges) - kept[i]
		k.A, k.EdgeIDs, k.NumEdges = a, neid[i], int(kept[i])
		nptr[i], nidx[i], neid[i] = nil, nil, nil
	}
	return removed, nil
}
