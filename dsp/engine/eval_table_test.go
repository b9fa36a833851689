package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/infer"
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
			devs := func() []backend.Backend { return cpusAt(t, tc.k, cfg.Train.Precision) }
			var mu sync.Mutex
			var seen [][]backend.Buffer
			got := run(t, cfg, Options{Backends: devs(), noEvalShards: true, evalInputs: func(in []backend.Buffer) {
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

// TestEvalReadsPartitionedCache: with a partitioned feature cache that
// caches every row (each on the device whose patch holds it), the
// whole-graph evaluation reads layer 1's input from the devices' cached
// rows by the inference's exchange (infer.Options.InputShards), on 2 and
// 3 CPU virtual devices, with and without row normalization: every
// epoch's accuracies and validation loss are the uploading path's bit
// for bit. A partial cache, a replicated one (read as a whole table
// instead) and bf16 stores give no shards, with the same numbers.
func TestEvalReadsPartitionedCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		k      int
		cfg    func(*Config)
		passed bool
	}{
		{"2 devices", 2, func(c *Config) { c.CachePolicy = cache.Partition }, true},
		{"3 devices, no row norm", 3, func(c *Config) { c.CachePolicy, c.Train.RowNorm = cache.Partition, train.RowNormOff }, true},
		{"partial cache", 2, func(c *Config) { c.CachePolicy, c.CacheBytes = cache.Partition, 100*16*4 }, false},
		{"replicated", 2, func(c *Config) { c.CachePolicy = cache.Replicate }, false},
		{"bf16", 2, func(c *Config) { c.CachePolicy, c.Train.Precision = cache.Partition, "bf16" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small(tc.k, 2)
			cfg.Train.Eval, cfg.Train.EvalFanouts = train.Full, nil
			tc.cfg(&cfg)
			devs := func() []backend.Backend { return cpusAt(t, tc.k, cfg.Train.Precision) }
			var mu sync.Mutex
			var seen []*infer.Shards
			got := run(t, cfg, Options{Backends: devs(), evalShardsSeen: func(sh *infer.Shards) {
				mu.Lock()
				seen = append(seen, sh)
				mu.Unlock()
			}})
			want := run(t, cfg, Options{Backends: devs(), noEvalTable: true})
			sameEpochs(t, &got.Report, &want.Report)
			if len(seen) != cfg.Train.Epochs {
				t.Fatalf("%d evaluations asked for shards, want %d", len(seen), cfg.Train.Epochs)
			}
			for e, sh := range seen {
				if !tc.passed {
					if sh != nil {
						t.Errorf("evaluation %d was given shards, want none", e+1)
					}
					continue
				}
				if sh == nil || len(sh.Tables) != tc.k || sh.Holder == nil {
					t.Fatalf("evaluation %d was given shards %+v, want %d tables", e+1, sh, tc.k)
				}
				total := 0
				for d, buf := range sh.Tables {
					total += sh.Rows[d]
					if buf == nil || buf.DType() != backend.Float32 {
						t.Errorf("evaluation %d: shard %d is %v", e+1, d, buf)
					}
				}
				if n := int(tiny(t).NumNodes()); total != n {
					t.Errorf("evaluation %d: the shards hold %d rows of %d", e+1, total, n)
				}
			}
		})
	}
}

// cpusAt opens k CPU virtual devices at precision ("" or fp32, tf32,
// bf16).
func cpusAt(t *testing.T, k int, precision string) []backend.Backend {
	t.Helper()
	p, err := backend.ParsePrecision(precision)
	if err != nil {
		t.Fatal(err)
	}
	bs := make([]backend.Backend, k)
	for i := range bs {
		if bs[i], err = cpu.New(cpu.Options{Precision: p}); err != nil {
			t.Fatal(err)
		}
	}
	return bs
}
