package infer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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

// minSpread is the smallest feature table spreadFeatures spreads (a
// variable for the tests): below it the uploads take little time and
// opening NCCL for them would take more.
var minSpread = 1 << 30

// spreadFeatures fills out, the whole dense feature table's buffer on
// every device (distinct back ends), by an upload of each device's range
// (Options.Offsets) and one all-gather over the exchange: the host sends
// the table once, not once a device. Every communicator refuses a source
// inside its destination (comm's front checks overlap), so the ranges go
// up to staging buffers. false, with out untouched, when the exchange
// does not open or the staging does not fit (the caller uploads the
// table whole); an error when an upload or the all-gather fails (out
// then partly written).
func (r *run) spreadFeatures(ctx context.Context, out []backend.Buffer) (bool, error) {
	bs, off, cols := r.opts.Backends, r.opts.Offsets, r.x.Cols
	fail := func(d int, err error) error {
		return &Error{Op: "layer 1 input on " + bs[d].Name(), Err: err}
	}
	whole := func(why string) {
		if r.opts.Log != nil {
			fmt.Fprintf(r.opts.Log, "inference layer 1: the features go whole to each device (%s)\n", why)
		}
	}
	if err := r.openExchange(ctx); err != nil {
		whole(err.Error())
		return false, nil
	}
	t0 := time.Now()
	counts := make([]int, len(bs))
	own := make([]backend.Buffer, len(bs))
	defer func() {
		for d, buf := range own {
			if buf != nil {
				bs[d].Free(buf)
			}
		}
	}()
	for d, b := range bs {
		counts[d] = int(off[d+1]-off[d]) * cols
		buf, err := allocRaw(b, backend.Float32, counts[d])
		if errors.Is(err, backend.ErrOutOfMemory) {
			whole(fmt.Sprintf("no room on %s to stage its range: %v", b.Name(), err))
			return false, nil
		}
		if err != nil {
			return false, fail(d, err)
		}
		own[d] = buf
	}
	// All uploads finish before any device enters the all-gather: a
	// failed one would leave the others waiting for the stall timeout.
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for d, b := range bs {
		if lo := int(off[d]) * cols; counts[d] > 0 {
			wg.Go(func() { errs[d] = b.Upload(own[d], r.x.Dense[lo:lo+counts[d]]) })
		}
	}
	wg.Wait()
	for d, err := range errs {
		if err != nil {
			return false, fail(d, err)
		}
	}
	for d := range bs {
		wg.Go(func() {
			errs[d] = r.collective(ctx, "features", func(ctx context.Context) error {
				if err := r.exch[d].AllGatherV(ctx, out[d], own[d], counts); err != nil {
					return err
				}
				return r.exch[d].Sync(ctx) // before own's buffer is freed
			})
		})
	}
	wg.Wait()
	for d, err := range errs {
		if err != nil {
			return false, fail(d, err)
		}
	}
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "inference layer 1: the features uploaded by ranges (at most %s a device) and all-gathered over the exchange in %.2f s\n",
			gb(4*int64(slices.Max(counts))), time.Since(t0).Seconds())
	}
	return true, nil
}
