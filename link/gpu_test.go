package link

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/train"
)

// TestGPUMatchesCPU needs a CUDA GPU (it skips without one): link
// prediction on the GPU back end gives the CPU's losses (to 1e-4
// relative: the GPU sums in another order) and metrics, whole-graph and
// sampled, with both decoders.
func TestGPUMatchesCPU(t *testing.T) {
	g := gputest.One(t)
	ds := cora(t)
	cpu := cpuBackend(t)
	for name, edit := range map[string]func(*Config){
		"gcn full dot":    func(c *Config) { c.Epochs = 8 },
		"gcn full mlp":    func(c *Config) { c.Epochs, c.Decoder = 8, DecoderMLP },
		"sage sampled":    func(c *Config) { c.Model, c.Mode, c.BatchSize, c.Epochs = train.SAGE, train.Sampled, 1024, 2 },
		"gat full degree": func(c *Config) { c.Model, c.Hidden, c.Heads, c.Epochs, c.NegSample = train.GAT, 8, 4, 4, NegDegree },
	} {
		cfg := Defaults(train.GCN)
		edit(&cfg)
		if cfg.Model == train.GAT && cfg.LR == 0.01 {
			cfg.LR = 0.005
		}
		want, err := Run(context.Background(), ds, cfg, Options{Backend: cpu})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Run(context.Background(), ds, cfg, Options{Backend: g})
		if err != nil {
			t.Fatalf("%s on %s: %v", name, g.Name(), err)
		}
		for e := range want.Epochs {
			a, b := got.Epochs[e].Loss, want.Epochs[e].Loss
			if d := math.Abs(a-b) / math.Max(math.Abs(b), 1e-12); !(d <= 1e-4) {
				t.Fatalf("%s epoch %d: loss %.9f on %s, %.9f on the CPU", name, e+1, a, g.Name(), b)
			}
		}
		if math.Abs(got.Test.AUC-want.Test.AUC) > 0.01 {
			t.Fatalf("%s: test AUC %.4f on %s, %.4f on the CPU", name, got.Test.AUC, g.Name(), want.Test.AUC)
		}
		t.Logf("%s: losses within 1e-4 of the CPU's; test %s (CPU AUC %.4f)", name, MetricsLine(got.Test, cfg.HitsK), want.Test.AUC)
	}
}
