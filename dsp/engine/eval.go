package engine

import (
	"context"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// Device 0 evaluates as the single-device trainer does, with its
// evaluator (train.Evaluator: the whole graph with all neighbors, layer
// by layer, or sampled mini-batches of the train, validation and test
// nodes drawn on the host from the whole graph). With several devices
// both are spread over them: the sampled batches (Evaluator.RunShard),
// or the whole graph's node ranges, one per device, run from device 0's
// goroutine while the others wait for the tally (Evaluator.RunDevices);
// sumTallies adds the tallies up.

// sumTallies adds every rank's tally t over c: it all-gathers them (the
// validation loss as bits) and adds them in rank order, so every rank
// gets the same sums whatever the back end's reduction order. Every rank
// must call it.
func sumTallies(ctx context.Context, c comm.Comm, t train.Tally) (train.Tally, error) {
	mine := make([]int64, 0, 7)
	mine = append(mine, t.Correct[:]...)
	mine = append(mine, t.Count[:]...)
	mine = append(mine, int64(math.Float64bits(t.ValLoss)))
	all := make([]int64, c.Size()*len(mine))
	if err := c.AllGather(ctx, cpu.WrapI64(all), cpu.WrapI64(mine)); err != nil {
		return train.Tally{}, err
	}
	var sum train.Tally
	for r := range c.Size() {
		v := all[r*len(mine) : (r+1)*len(mine)]
		var o train.Tally
		copy(o.Correct[:], v[0:3])
		copy(o.Count[:], v[3:6])
		o.ValLoss = math.Float64frombits(uint64(v[6]))
		sum.Add(o)
	}
	return sum, nil
}
