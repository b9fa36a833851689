package fullgraph

import (
	"errors"
	"testing"
)

// TestHaloExchangeExact: halo exchange sends each device only the rows it
// reads (and in training, on the last layer, the rows its training nodes
// read, with the gradient messages restricted alike); every row read has
// the value the block exchange gives it, so the runs are bit-identical,
// exact and with staleness (zero variation bound: only the constant
// first layer is skipped), with fewer broadcast, gradient and evaluation
// bytes.
func TestHaloExchangeExact(t *testing.T) {
	ds := tiny(t)
	for _, tc := range []struct {
		model  string
		hidden int
		stale  bool
	}{{GCN, 16, false}, {SAGE, 32, false}, {SAGE, 32, true}, {SAGE, 8, false}} {
		cfg := Defaults(tc.model)
		cfg.Hidden, cfg.Layers, cfg.Epochs = tc.hidden, 3, 4
		if tc.stale {
			cfg.Staleness = Staleness{Enabled: true, EpochBound: 3, Epsilon: 0}
		}
		want := run(t, ds, cfg, 3)
		cfg.Exchange = ExchangeHalo
		got := run(t, ds, cfg, 3)
		for e := range want.Epochs {
			if got.Epochs[e].Loss != want.Epochs[e].Loss || got.Epochs[e].TestAccuracy != want.Epochs[e].TestAccuracy {
				t.Fatalf("%s %d stale %v, epoch %d: loss %v acc %v with halo exchange, blocks %v %v", tc.model, tc.hidden, tc.stale, e+1,
					got.Epochs[e].Loss, got.Epochs[e].TestAccuracy, want.Epochs[e].Loss, want.Epochs[e].TestAccuracy)
			}
		}
		g, w := got.Comm, want.Comm
		t.Logf("%s %d stale %v: broadcast %d -> %d, gradient %d -> %d, evaluation %d -> %d bytes", tc.model, tc.hidden, tc.stale,
			w.BytesSent, g.BytesSent, w.GradBytesSent, g.GradBytesSent, w.EvalBytes, g.EvalBytes)
		if g.BytesSent >= w.BytesSent || g.GradBytesSent >= w.GradBytesSent || g.EvalBytes >= w.EvalBytes || g.GradBytesSent == 0 {
			t.Errorf("%s %d stale %v: broadcast %d, gradient %d, evaluation %d bytes with halo exchange; blocks %d, %d, %d",
				tc.model, tc.hidden, tc.stale, g.BytesSent, g.GradBytesSent, g.EvalBytes, w.BytesSent, w.GradBytesSent, w.EvalBytes)
		}
	}
	cfg := Defaults(GAT)
	cfg.Exchange = ExchangeHalo
	var ce *ConfigError
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "exchange" {
		t.Errorf("GAT with halo exchange: %v, want a config error on exchange", err)
	}
	cfg = Defaults(GCN)
	cfg.Exchange = "rows"
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "exchange" {
		t.Errorf("exchange %q: %v, want a config error on exchange", cfg.Exchange, err)
	}
}
