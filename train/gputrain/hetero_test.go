package gputrain

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// TestTypedMatchesCPU: hsage and rgcn on the hetero preset (with reverse
// relations) trained on cuda:0 with typed batches sampled on the GPU
// (NewTyped, as `strata train --model hsage --device cuda:0`) follow the
// CPU run: the same batches, so the first loss agrees to float rounding,
// the others within 2%, and the test accuracy within 3 points. The rgcn
// run evaluates with sampled batches (the evaluation sampler on the GPU
// too).
func TestTypedMatchesCPU(t *testing.T) {
	d := gpu(t)
	c := gen.HeteroPreset()
	c.Papers = 3000
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{train.HSAGE, train.RGCN} {
		cfg := train.HeteroDefaults(model)
		cfg.Epochs, cfg.Hidden, cfg.AddReverse, cfg.BatchSize = 3, 32, true, 128
		if model == train.RGCN {
			cfg.Eval, cfg.EvalFanouts = train.Sampled, []int{10, 10}
		}
		ref, err := train.RunHetero(context.Background(), h, cfg, train.Options{Backend: cpuBackend(t)})
		if err != nil {
			t.Fatal(err)
		}
		made, mk := 0, NewTyped(Options{})
		got, err := train.RunHetero(context.Background(), h, cfg, train.Options{Backend: d,
			TypedSampler: func(b backend.Backend, n []int64, rels []sample.Relation, sc sample.HeteroConfig) (sample.TypedSampler, error) {
				s, err := mk(b, n, rels, sc)
				if _, ok := s.(*gpusample.HeteroSampler); ok && err == nil {
					made++
				}
				return s, err
			}})
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if cfg.Eval == train.Sampled {
			want = 2
		}
		if made != want {
			t.Fatalf("%s: %d GPU typed samplers made, want %d", model, made, want)
		}
		var la, lb []float64
		for i := range ref.Epochs {
			la = append(la, ref.Epochs[i].BatchLosses...)
			lb = append(lb, got.Epochs[i].BatchLosses...)
		}
		if len(la) != len(lb) || len(la) == 0 {
			t.Fatalf("%s: %d vs %d losses", model, len(la), len(lb))
		}
		worst := 0.0
		for i := range la {
			worst = max(worst, math.Abs(la[i]-lb[i])/math.Abs(la[i]))
		}
		t.Logf("%s: %d batches: first loss cpu %.6f gpu %.6f, last cpu %.6f gpu %.6f, worst relative difference %.2e; test accuracy cpu %.4f gpu %.4f",
			model, len(la), la[0], lb[0], la[len(la)-1], lb[len(lb)-1], worst, ref.TestAccuracy, got.TestAccuracy)
		if d0 := math.Abs(la[0]-lb[0]) / la[0]; d0 > 1e-4 {
			t.Fatalf("%s first batch: loss %v on the GPU, %v on the CPU", model, lb[0], la[0])
		}
		if worst > 2e-2 {
			t.Fatalf("%s: losses drift apart: worst relative difference %.3g", model, worst)
		}
		if math.Abs(ref.TestAccuracy-got.TestAccuracy) > 0.03 {
			t.Fatalf("%s: test accuracy %.4f on the GPU, %.4f on the CPU", model, got.TestAccuracy, ref.TestAccuracy)
		}
	}
}
