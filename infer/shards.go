package infer

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-gnn/strata/tensor/backend"
)

// checkShards checks Options.InputShards against the features and the
// devices, and makes them layer 1's resident input (r.feats).
func (r *run) checkShards() error {
	const op = "setup"
	sh := r.opts.InputShards
	if sh == nil {
		return nil
	}
	p := len(r.opts.Backends)
	switch {
	case r.x.Sparse != nil:
		return errf(op, "feature shards given for sparse features (they are gathered as sparse rows)")
	case len(sh.Tables) != p || len(sh.Rows) != p:
		return errf(op, "%d feature shards with %d row counts for %d back ends", len(sh.Tables), len(sh.Rows), p)
	}
	cols := r.x.Cols
	rl := &resLayer{bufs: make([]backend.Buffer, p), rows: make([]int, p), base: make([]int, p), width: cols, where: sh.Holder, caller: true}
	for d, buf := range sh.Tables {
		rows := sh.Rows[d]
		if sh.Holder == nil {
			if want := r.opts.Offsets[d+1] - r.opts.Offsets[d]; int64(rows) != want {
				return errf(op, "feature shard %d has %d rows, device %d's range [%d, %d) %d", d, rows, d, r.opts.Offsets[d], r.opts.Offsets[d+1], want)
			}
		}
		switch {
		case rows < 0 || rows > r.n:
			return errf(op, "feature shard %d has %d rows (want 0 to %d)", d, rows, r.n)
		case buf == nil && rows > 0:
			return errf(op, "feature shard %d of %d rows has no buffer", d, rows)
		case buf != nil && (buf.DType() != backend.Float32 || buf.Len() != rows*cols):
			return errf(op, "feature shard %d is %d %v values, want %d x %d float32", d, buf.Len(), buf.DType(), rows, cols)
		}
		rl.bufs[d], rl.rows[d] = buf, rows
		rl.bytes = max(rl.bytes, 4*int64(rows)*int64(cols))
	}
	r.feats = rl
	return nil
}

// shardInput returns layer 1's input on the devices (Options.InputShards,
// or shards it uploads: autoShards) when it can be read there: with
// several devices the exchange must open; otherwise nil, and layer 1
// reads the features as without shards.
func (r *run) shardInput(ctx context.Context) *resLayer {
	if r.opts.Placement == PlaceHost {
		return nil
	}
	if r.feats == nil {
		r.feats = r.autoShards(ctx)
	}
	if r.feats == nil {
		return nil
	}
	if len(r.opts.Backends) > 1 {
		if err := r.openExchange(ctx); err != nil {
			if r.opts.Log != nil {
				fmt.Fprintf(r.opts.Log, "inference layer 1 does not read the feature shards on the devices: %v\n", err)
			}
			return nil
		}
	}
	return r.feats
}

// autoShards uploads each device's range of the dense features
// (Options.Offsets) to it when the whole table does not fit the devices
// (PlaceAuto's rule: half of a device's free memory) but every range
// fits beside twice the chunk budget, on several devices that report
// their memory (GPUs) and whose exchange opens: layer 1 then reads its
// sources from the devices that hold them instead of gathering every
// chunk's rows on the host (at papers100M's size the 57 GB table does
// not fit an 80 GB GPU twice, a quarter of it does). The run frees them
// after layer 1. nil when it does not apply or an upload fails.
func (r *run) autoShards(ctx context.Context) *resLayer {
	p := len(r.opts.Backends)
	if p < 2 || r.opts.Placement != PlaceAuto || r.x.Sparse != nil || r.opts.Inputs != nil || r.fits(uint64(len(r.x.Dense))*4) {
		return nil
	}
	cols := r.x.Cols
	for d, b := range r.opts.Backends {
		m, ok := b.(backend.Memory)
		if !ok || sameBackend(r.opts.Backends[:d], b) >= 0 {
			return nil // virtual devices share memory: not this path
		}
		free, _, err := m.MemInfo()
		rows := r.opts.Offsets[d+1] - r.opts.Offsets[d]
		if err != nil || uint64(4*rows*int64(cols)+2*r.budgets[d]) > free {
			return nil
		}
	}
	if err := r.openExchange(ctx); err != nil {
		return nil
	}
	rl := &resLayer{bufs: make([]backend.Buffer, p), rows: make([]int, p), base: make([]int, p), width: cols}
	// Every device uploads its range at once (distinct back ends, checked
	// above).
	errs := make([]error, p)
	var wg sync.WaitGroup
	for d, b := range r.opts.Backends {
		lo, hi := r.opts.Offsets[d], r.opts.Offsets[d+1]
		rl.rows[d] = int(hi - lo)
		rl.bytes = max(rl.bytes, 4*(hi-lo)*int64(cols))
		if hi == lo {
			continue // nothing to hold: no buffer
		}
		wg.Go(func() {
			buf, err := allocRaw(b, backend.Float32, rl.rows[d]*cols)
			if err == nil {
				rl.bufs[d] = buf
				err = b.Upload(buf, r.x.Dense[lo*int64(cols):hi*int64(cols)])
			}
			errs[d] = err
		})
	}
	wg.Wait()
	for d, err := range errs {
		if err != nil {
			rl.free(r.opts.Backends)
			if r.opts.Log != nil {
				fmt.Fprintf(r.opts.Log, "inference layer 1: the features' ranges not uploaded (%s: %v)\n", r.opts.Backends[d].Name(), err)
			}
			return nil
		}
	}
	r.ownFeats = true
	return rl
}
