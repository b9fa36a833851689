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
// epoch's key (the single-device trainer's order), then Deal them to
// their owners.
func assign(ids []graph.NodeID, b *book.Book, batchSize int, mode string, seed uint64, epoch int) (*epochPlan, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("no training nodes")
	}
	order := train.Shuffled(ids, seed, epoch)
	batches, dropped, err := Deal(order, func(v int32) int { return b.Owner(int64(v)) }, b.K(), batchSize, mode)
	if err != nil {
		return nil, err
	}
	return &epochPlan{batches: batches, dropped: dropped}, nil
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
