package engine

import (
	"fmt"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/train"
)

// tagPresample keys the pre-sampling pass that ranks nodes by use.
const tagPresample uint64 = 0x505245 // "PRE"

// epochPlan is one epoch's batches: batches[r][i] is device r's batch i;
// every device has the same number of batches.
type epochPlan struct {
	batches [][][]graph.NodeID
	dropped int // training nodes left out (trim)
}

// assign deals one epoch's training nodes to the devices: shuffle with the
// epoch's key, give every node to the device owning it, move the excess of
// devices above their share to devices below it (in rank order), and cut
// each device's nodes into batches.
func assign(ids []graph.NodeID, b *book.Book, batchSize int, mode string, seed uint64, epoch int) (*epochPlan, error) {
	k := b.K()
	t := len(ids)
	if t == 0 {
		return nil, fmt.Errorf("no training nodes")
	}
	order := train.Shuffled(ids, seed, epoch) // the single-device trainer's order
	own := make([][]graph.NodeID, k)
	for _, v := range order {
		o := b.Owner(int64(v))
		own[o] = append(own[o], v)
	}
	share := make([]int, k)
	switch mode {
	case Trim:
		per := t / (k * batchSize) * batchSize
		if per == 0 {
			return nil, fmt.Errorf("trim: %d training nodes do not fill one batch of %d on each of %d devices (use pad)", t, batchSize, k)
		}
		for r := range share {
			share[r] = per
		}
	default:
		for r := range share {
			share[r] = t / k
			if r < t%k {
				share[r]++
			}
		}
	}
	var spare []graph.NodeID
	for r := range own {
		if len(own[r]) > share[r] {
			spare = append(spare, own[r][share[r]:]...)
			own[r] = own[r][:share[r]:share[r]]
		}
	}
	for r := range own {
		if need := share[r] - len(own[r]); need > 0 {
			take := min(need, len(spare))
			own[r] = append(own[r], spare[:take]...)
			spare = spare[take:]
		}
	}
	p := &epochPlan{batches: make([][][]graph.NodeID, k), dropped: len(spare)}
	nb := (share[0] + batchSize - 1) / batchSize // share[0] is the largest
	for r, nodes := range own {
		for i := range nb {
			lo := min(i*batchSize, len(nodes))
			hi := min(lo+batchSize, len(nodes))
			bt := nodes[lo:hi:hi]
			if len(bt) == 0 {
				// Only the last batch of a device one node short of the
				// largest share: repeat a node so every device steps.
				if len(nodes) > 0 {
					bt = nodes[:1:1]
				} else {
					bt = order[r%t : r%t+1 : r%t+1]
				}
			}
			p.batches[r] = append(p.batches[r], bt)
		}
	}
	return p, nil
}

// presamplePlan is the pre-sampling pass's batches: every device's
// epoch-0 batches dealt as assign does, with the pre-sampling key instead
// of the training seed (so the pass draws other neighborhoods than the
// first epoch). The host pass and the GPUs' pass sample exactly these.
type presamplePlan struct {
	batches [][][]graph.NodeID // batches[r][i] is device r's batch i
	seed    uint64
}

// newPresamplePlan deals pd's training nodes for the pre-sampling pass
// (cfg is normalized).
func newPresamplePlan(pd *partitioned, cfg *Config) (*presamplePlan, error) {
	if pd == nil || pd.book == nil || pd.ds == nil || cfg == nil {
		return nil, fmt.Errorf("dsp: presample: missing partition or configuration")
	}
	seed := rng.Derive(cfg.Train.Seed, tagPresample)
	p, err := assign(pd.ds.Train, pd.book, cfg.Train.BatchSize, cfg.Rebalance, seed, 0)
	if err != nil {
		return nil, fmt.Errorf("dsp: presample: %w", err)
	}
	return &presamplePlan{batches: p.batches, seed: seed}, nil
}

// key is the sampling key of device r's batch i (global batch i*K+r).
func (p *presamplePlan) key(r, i int) sample.Key {
	return sample.Key{Seed: p.seed, Batch: i*len(p.batches) + r}
}
