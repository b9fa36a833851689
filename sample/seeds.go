package sample

import (
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// SeedBatches shuffles train for the epoch key.Epoch and cuts it into
// batches of batchSize (the last one may be shorter). The order is a
// Fisher-Yates shuffle driven by the counter-based stream of (key.Seed,
// key.Epoch): the same on every machine and every run; key.Batch is
// ignored. train is not modified; the batches share one new array, and
// batch i is meant to be sampled with Key{Seed, Epoch, Batch: i}.
func SeedBatches(train []graph.NodeID, batchSize int, key Key) ([][]graph.NodeID, error) {
	const op = "SeedBatches"
	if batchSize <= 0 {
		return nil, errorf(op, "batchSize", -1, ErrConfig, "%d: want > 0", batchSize)
	}
	if err := checkNodes(op, "train", train, math.MaxInt32); err != nil {
		return nil, err
	}
	perm := make([]graph.NodeID, len(train))
	copy(perm, train)
	st := rng.NewStream(rng.Derive(key.Seed, tagShuffle, uint64(key.Epoch)))
	for i := len(perm) - 1; i > 0; i-- {
		j := st.Below(uint64(i) + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	batches := make([][]graph.NodeID, 0, NumBatches(len(perm), batchSize))
	for lo := 0; lo < len(perm); lo += batchSize {
		hi := min(lo+batchSize, len(perm))
		batches = append(batches, perm[lo:hi:hi])
	}
	return batches, nil
}

// NumBatches is the number of batches SeedBatches makes: ceil(n/batchSize).
func NumBatches(n, batchSize int) int {
	if batchSize <= 0 || n <= 0 {
		return 0
	}
	return (n + batchSize - 1) / batchSize
}
