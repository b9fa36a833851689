package train

import (
	"testing"

	"github.com/strata-gnn/strata/dataset/builtin"
)

// BenchmarkEpoch times one sampled training epoch plus its evaluation on
// the built-in Cora with each model's default settings in sampled mode
// (batch 32, fanouts 10,10: 5 batches per epoch; whole-graph epochs are
// fullgraph's BenchmarkEpochCPU). ns/op is the epoch's wall time;
// cpu-ms/epoch its CPU time over all threads (steadier on a shared
// machine).
func BenchmarkEpoch(b *testing.B) {
	ds, err := builtin.Load("cora")
	if err != nil {
		b.Fatal(err)
	}
	for _, model := range []string{GCN, SAGE, GAT} {
		b.Run(model+"-sampled", func(b *testing.B) {
			cfg := Defaults(model)
			cfg.Mode = Sampled
			r, err := newRunner(ds, cfg, Options{Backend: cpuBackend(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer r.free()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				order := Shuffled(ds.Train, cfg.Seed, i)
				for bi := 0; bi < r.numBatches && err == nil; bi++ {
					lo := bi * cfg.BatchSize
					_, err = r.sampledStep(i, bi, order[lo:min(lo+cfg.BatchSize, len(order))])
				}
				if err == nil {
					_, err = r.eval.evaluate()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if cpu := cpuTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/epoch")
			}
		})
	}
}
