package serve

import (
	"fmt"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/serve/servepb"
)

// Partition is the part of a partition (`strata partition`: the
// renumbered dataset, whose part p owns the node IDs [offsets[p],
// offsets[p+1])) that a server owns. Clients route each seed to the
// server of its owner (SampleRequest.owned); the server still holds the
// whole graph, since neighborhoods cross parts.
type Partition struct {
	Book        *book.Book
	Part        int
	Fingerprint string // of the renumbered dataset (partition.Meta.OutputFingerprint)
}

func (p *Partition) check(ds *dataset.Dataset) error {
	if p.Book == nil {
		return fmt.Errorf("serve: partition without a book")
	}
	if p.Part < 0 || p.Part >= p.Book.K() {
		return fmt.Errorf("serve: part %d of a partition into %d parts", p.Part, p.Book.K())
	}
	if p.Book.NumNodes() != ds.NumNodes() {
		return fmt.Errorf("serve: the partition covers %d nodes, the dataset %q has %d", p.Book.NumNodes(), ds.Name, ds.NumNodes())
	}
	return nil
}

// owned returns the seeds this part owns, in their order, and each one's
// position in seeds.
func (p *Partition) owned(seeds []graph.NodeID) ([]graph.NodeID, []int32) {
	lo, hi := p.Book.Range(p.Part)
	var out []graph.NodeID
	var pos []int32
	for k, v := range seeds {
		if int64(v) >= lo && int64(v) < hi {
			out = append(out, v)
			pos = append(pos, int32(k))
		}
	}
	return out, pos
}

// count returns how many of ids this part owns.
func (p *Partition) count(ids []int32) int64 {
	lo, hi := p.Book.Range(p.Part)
	var n int64
	for _, v := range ids {
		if int64(v) >= lo && int64(v) < hi {
			n++
		}
	}
	return n
}

// info describes p for InfoReply (nil for no partition).
func (p *Partition) info(ds *dataset.Dataset) *servepb.PartitionInfo {
	if p == nil {
		return nil
	}
	return &servepb.PartitionInfo{Part: uint32(p.Part), NumParts: uint32(p.Book.K()), Offsets: p.Book.Offsets(),
		Fingerprint: p.Fingerprint, NumTrain: p.count(ds.Train), NumVal: p.count(ds.Val), NumTest: p.count(ds.Test)}
}
