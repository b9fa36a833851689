package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// TestEvalReadsFeatureCache: the whole-graph evaluation reads layer 1's
// input from the devices' feature stores when they hold every row in
// node order at float32 (CPU virtual devices: the host table wrapped, as
// a GPU's cached table), with and without row normalization, on one
// device and on two; every epoch's accuracies and validation loss are
// the uploading path's bit for bit. Partitioned or partial caches and
// bf16 stores fall back (no table passed), with the same numbers.
func TestEvalReadsFeatureCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		k      int
		cfg    func(*Config)
		passed bool
	}{
		{"replicated, row norm", 2, func(c *Config) { c.CachePolicy, c.Train.RowNorm = cache.Replicate, train.RowNormOn }, true},
		{"replicated, no row norm", 2, func(c *Config) { c.CachePolicy, c.Train.RowNorm = cache.Replicate, train.RowNormOff }, true},
		{"auto policy", 2, func(c *Config) { c.CachePolicy = cache.Auto }, true},
		{"one device", 1, func(*Config) {}, true},
		{"partitioned", 2, func(*Config) {}, false},
		{"partial cache", 2, func(c *Config) { c.CachePolicy, c.CacheBytes = cache.Replicate, 100*16*4 }, false},
		{"bf16", 2, func(c *Config) { c.CachePolicy, c.Train.Precision = cache.Replicate, "bf16" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small(tc.k, 2)
			cfg.Train.Eval, cfg.Train.EvalFanouts = train.Full, nil
			tc.cfg(&cfg)
			devs := func() []backend.Backend {
				bs := make([]backend.Backend, tc.k)
				for i := range bs {
					p := backend.FP32
					if cfg.Train.Precision == "bf16" {
						p = backend.BF16
					}
					b, err := cpu.New(cpu.Options{Precision: p})
					if err != nil {
						t.Fatal(err)
					}
					bs[i] = b
				}
				return bs
			}
			var mu sync.Mutex
			var seen [][]backend.Buffer
			got := run(t, cfg, Options{Backends: devs(), evalInputs: func(in []backend.Buffer) {
				mu.Lock()
				seen = append(seen, in)
				mu.Unlock()
			}})
			want := run(t, cfg, Options{Backends: devs(), noEvalTable: true})
			sameEpochs(t, &got.Report, &want.Report)
			if len(seen) != cfg.Train.Epochs {
				t.Fatalf("%d evaluations asked for inputs, want %d", len(seen), cfg.Train.Epochs)
			}
			for e, in := range seen {
				desc := fmt.Sprintf("%d inputs", len(in))
				ok := len(in) == tc.k
				for _, b := range in {
					ok = ok && b != nil && b.DType() == backend.Float32
				}
				if tc.passed && !ok || !tc.passed && in != nil {
					t.Errorf("evaluation %d was given %s (%v), want the tables passed: %v", e+1, desc, in, tc.passed)
				}
			}
		})
	}
}
