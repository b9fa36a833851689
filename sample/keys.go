package sample

import "github.com/strata-gnn/strata/internal/rng"

// Domain tags keep the random streams of different uses of one Key apart.
const (
	tagShuffle  = 0x5348554646 // "SHUFF"
	tagNeighbor = 0x4e42520000 // "NBR"
	tagWalk     = 0x57414c4b00 // "WALK"
	tagNegative = 0x4e45470000 // "NEG"
)

// HopKey names the stream family of one hop of one batch. The stream of a
// destination node v is rng.Derive(HopKey, v): it depends on the node, not
// on its position or on who samples it, so a distributed sampler that sends
// v to its owner, or a device sampler, draws exactly what a local sampler
// would.
func HopKey(k Key, hop int) uint64 {
	return rng.Derive(k.Seed, tagNeighbor, uint64(k.Epoch), uint64(k.Batch), uint64(hop))
}

// batchKey names per-batch streams of other kinds (walks, negatives).
func batchKey(k Key, tag uint64) uint64 {
	return rng.Derive(k.Seed, tag, uint64(k.Epoch), uint64(k.Batch))
}
