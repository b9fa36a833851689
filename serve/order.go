package serve

import (
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// Epoch says which seeds one rank samples in one epoch; the zero values
// of World and BatchSize are invalid (Plan checks).
type Epoch struct {
	BatchSize int
	Shuffle   bool
	Seed      uint64
	Epoch     int
	DropLast  bool
	Rank      int
	World     int // data-parallel ranks sharing the seeds
	// Part of Parts: set for the seeds one part of a partition owns
	// (partition routing), so that the parts' batches get distinct keys.
	Part, Parts int
}

// NumBatches is the number of batches each rank gets from n seeds:
// ceil(n/world) seeds per rank (floor with dropLast), cut into batches of
// batchSize (a last short batch dropped with dropLast). strata_pyg's
// len(loader) computes the same.
func NumBatches(n, batchSize, world int, dropLast bool) int {
	if n <= 0 || batchSize <= 0 || world <= 0 {
		return 0
	}
	per := perRank(n, world, dropLast)
	if dropLast {
		return per / batchSize
	}
	return (per + batchSize - 1) / batchSize
}

func perRank(n, world int, dropLast bool) int {
	if dropLast {
		return n / world
	}
	return (n + world - 1) / world
}

// Plan orders n seeds for one rank's epoch and returns their positions in
// the seed list (input_id), the first batchSize of them being batch 0.
// The order is the input order, or with Shuffle a Fisher-Yates
// permutation that depends only on (Seed, Epoch) (sample.SeedBatches's);
// for World > 1 that order is padded by wrapping around to a multiple of
// World (cut down to one with DropLast) and rank r takes the entries r,
// r+World, r+2*World, ...: every rank gets the same count, and together
// they cover every seed. Key returns batch i's sampling key.
func Plan(n int, e Epoch) ([]int32, error) {
	if n < 0 || n > math.MaxInt32 {
		return nil, reqErr(ErrInvalid, "seeds", -1, "%d seeds, at most 2^31-1", n)
	}
	if e.BatchSize <= 0 {
		return nil, reqErr(ErrInvalid, "batch_size", -1, "%d: want > 0", e.BatchSize)
	}
	if e.World <= 0 || e.Rank < 0 || e.Rank >= e.World {
		return nil, reqErr(ErrInvalid, "rank", -1, "rank %d of world_size %d: want 0 <= rank < world_size", e.Rank, e.World)
	}
	if e.Epoch < 0 {
		return nil, reqErr(ErrInvalid, "epoch", -1, "%d < 0", e.Epoch)
	}
	if n == 0 {
		return nil, nil
	}
	order := make([]graph.NodeID, n)
	for i := range order {
		order[i] = graph.NodeID(i)
	}
	if e.Shuffle {
		b, err := sample.SeedBatches(order, n, sample.Key{Seed: e.Seed, Epoch: e.Epoch})
		if err != nil {
			return nil, err
		}
		order = b[0]
	}
	if e.World == 1 {
		return order, nil
	}
	per := perRank(n, e.World, e.DropLast)
	out := make([]int32, per)
	for k := range out {
		out[k] = order[(e.Rank+k*e.World)%n]
	}
	return out, nil
}

// Key is the sampling key of batch i of e's rank: distinct for every
// (rank, batch) of an epoch, and with Parts > 0 for every part too.
func (e Epoch) Key(i int) sample.Key {
	b := i*e.World + e.Rank
	if e.Parts > 0 {
		b = b*e.Parts + e.Part
	}
	return sample.Key{Seed: e.Seed, Epoch: e.Epoch, Batch: b}
}
