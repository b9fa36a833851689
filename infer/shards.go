package infer

import (
	"context"
	"fmt"

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

// shardInput returns layer 1's input on the devices (Options.InputShards)
// when it can be read there: with several devices the exchange must
// open; otherwise nil, and layer 1 reads the features as without shards.
func (r *run) shardInput(ctx context.Context) *resLayer {
	if r.feats == nil || r.opts.Placement == PlaceHost {
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
