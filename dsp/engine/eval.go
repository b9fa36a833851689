package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/tensor/backend"
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

// evalInputs returns, per device of devs, layer 1's input of the
// whole-graph evaluation already in its memory (train.Evaluator.
// RunDevicesFrom), or nil for none: the device's feature store's table
// when the store holds every row, in node order, at float32
// (cache.NodeOrderTabler), and was built from the very features the
// evaluator reads (s.x is s.feats.Dense: after the row normalization,
// not a machine's shard). Otherwise the evaluation uploads the features
// itself, which at papers100M's size does not fit beside the cache and
// falls back to gathering every chunk's rows on the host (issue 15).
func (s *shared) evalInputs(devs []*device) []backend.Buffer {
	f := s.feats
	if s.opts.noEvalTable || f == nil || f.Sparse != nil || len(s.x) == 0 || len(f.Dense) != len(s.x) || &f.Dense[0] != &s.x[0] {
		if s.opts.evalInputs != nil {
			s.opts.evalInputs(nil)
		}
		return nil
	}
	out := make([]backend.Buffer, len(devs))
	found := 0
	for i, d := range devs {
		if out[i] = d.evalTable(len(s.x)); out[i] != nil {
			found++
		}
	}
	if found == 0 {
		out = nil
	}
	if s.opts.evalInputs != nil {
		s.opts.evalInputs(out)
	}
	if log := s.opts.Log; log != nil && found > 0 && !s.evalLogged {
		s.evalLogged = true
		fmt.Fprintf(log, "whole-graph evaluation reads layer 1's input from the feature cache on %d of %d devices\n", found, len(devs))
	}
	return out
}

// evalShards returns layer 1's input of the whole-graph evaluation on
// every device of devs as the partitioned feature cache holds it
// (infer.Options.InputShards), or nil: when the plan is partitioned
// over the devices and caches every row (each on the device that owns
// it: --cache-policy partition with a budget that holds a device's
// patch), every store holds its rows in one float32 buffer
// (cache.CachedTabler) and the store was built from the very features
// the evaluator reads. The evaluation then fetches each chunk's source
// rows from the devices that cache them, as the loader does, instead of
// a replicated table (which at papers100M's size leaves no room on an
// 80 GB GPU) or a gather on the host. Without it, evalInputs.
func (s *shared) evalShards(devs []*device) *infer.Shards {
	sh := s.shards(devs)
	if s.opts.evalShardsSeen != nil {
		s.opts.evalShardsSeen(sh)
	}
	if log := s.opts.Log; log != nil && sh != nil && !s.evalLogged {
		s.evalLogged = true
		fmt.Fprintf(log, "whole-graph evaluation reads layer 1's input from the %d devices' partitioned feature cache\n", len(devs))
	}
	return sh
}

func (s *shared) shards(devs []*device) *infer.Shards {
	f := s.feats
	n := int(s.in.NumRows)
	if s.opts.noEvalShards || s.opts.noEvalTable || f == nil || f.Sparse != nil || len(s.x) == 0 || len(f.Dense) != len(s.x) || &f.Dense[0] != &s.x[0] ||
		s.plan == nil || s.plan.Policy() != cache.Partition || s.plan.Devices() != len(devs) || s.plan.CachedNodes() != n || len(devs) < 2 {
		return nil
	}
	sh := &infer.Shards{Tables: make([]backend.Buffer, len(devs)), Rows: make([]int, len(devs))}
	for i, d := range devs {
		if d.rank != i {
			return nil
		}
		rows := len(s.plan.Rows(i))
		buf := d.cachedTable(rows * s.dim)
		if buf == nil && rows > 0 {
			return nil
		}
		sh.Tables[i], sh.Rows[i] = buf, rows
	}
	plan := s.plan
	sh.Holder = func(v int32) (int, int32) { return plan.Holder(0, graph.NodeID(v)) }
	return sh
}

// cachedTable returns the device's feature store's cached rows (values
// floats, cache.CachedTabler) as the trainer's handle reads them, or nil.
func (d *device) cachedTable(values int) backend.Buffer {
	if d.evalShard != nil || d.kit == nil {
		return d.evalShard
	}
	t, ok := d.kit.store.(cache.CachedTabler)
	if !ok {
		return nil
	}
	buf, ok := t.CachedTable()
	d.evalShard = d.trainerView(buf, ok, values)
	return d.evalShard
}

// evalTable returns the device's feature store's table (values floats)
// as the trainer's handle reads it, or nil: on a GPU the store lives on
// the loader's handle, a sibling whose buffers the trainer's handle reads
// through an alias (the table was written at setup, long before).
func (d *device) evalTable(values int) backend.Buffer {
	if d.evalIn != nil || d.kit == nil {
		return d.evalIn
	}
	t, ok := d.kit.store.(cache.NodeOrderTabler)
	if !ok {
		return nil
	}
	buf, ok := t.NodeOrderTable()
	d.evalIn = d.trainerView(buf, ok, values)
	return d.evalIn
}

// trainerView returns a feature store's table buf (ok: the store has
// one) as the trainer's handle reads it, an alias when it lives on the
// loader's handle, or nil when it is not values float32s or cannot be
// aliased (the evaluation then uploads the features).
func (d *device) trainerView(buf backend.Buffer, ok bool, values int) backend.Buffer {
	if !ok || buf.DType() != backend.Float32 || buf.Len() != values {
		return nil
	}
	if sb, ok := d.b.(backend.Siblings); ok && d.lb != d.b && !sb.Owns(buf) {
		a, err := sb.Alias(buf)
		if err != nil {
			return nil
		}
		return a
	}
	return buf
}
