package train

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// denseToy is toyDataset with dense positive features (every value
// non-zero), so the trainers keep them dense.
func denseToy() *dataset.Dataset {
	ds := toyDataset(300, 3)
	s := rng.NewStream(7)
	x := make([]float32, len(ds.Features))
	for i, v := range ds.Features {
		x[i] = v + s.Uniform01()/3 + 0.01
	}
	ds.Features = x
	return ds
}

func TestFeaturesRound(t *testing.T) {
	ds := denseToy()
	orig := append([]float32(nil), ds.Features...)
	for _, norm := range []string{RowNormOff, RowNormOn} {
		f, err := NewFeatures(ds.Features, 300, ds.FeatDim, norm)
		if err != nil || f.Dense == nil {
			t.Fatalf("%s: dense features %v, %v", norm, f.Dense == nil, err)
		}
		before := append([]float32(nil), f.Dense...)
		f.Round(backend.TF32)
		f.Round(backend.FP32)
		if f.BF16 || !sameBits(f.Dense, before) {
			t.Fatalf("%s: tf32/fp32 changed the features", norm)
		}
		f.Round(backend.BF16)
		if !f.BF16 {
			t.Fatalf("%s: BF16 not set", norm)
		}
		changed := 0
		for i, v := range f.Dense {
			if v != backend.RoundBF16(before[i]) {
				t.Fatalf("%s: value %d = %v, want %v", norm, i, v, backend.RoundBF16(before[i]))
			}
			if v != before[i] {
				changed++
			}
		}
		if changed == 0 {
			t.Fatalf("%s: no value changed", norm)
		}
		f.Round(backend.BF16) // once only
		if !sameBits(ds.Features, orig) {
			t.Fatalf("%s: Round modified the dataset's features", norm)
		}
	}
	sp, err := NewFeatures(toyDataset(300, 3).Features, 300, 40, RowNormOn)
	if err != nil || sp.Sparse == nil {
		t.Fatalf("toy features not sparse: %v", err)
	}
	vals := append([]float32(nil), sp.Sparse.Values...)
	sp.Round(backend.BF16)
	for i, v := range sp.Sparse.Values {
		if v != backend.RoundBF16(vals[i]) {
			t.Fatalf("sparse value %d = %v, want %v", i, v, backend.RoundBF16(vals[i]))
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestPrecisionChecked: a precision the back end was not opened with is
// a *ConfigError naming both, for Run and NewEvaluator; an unknown one is
// refused by Validate; none takes the back end's, which the report names.
func TestPrecisionChecked(t *testing.T) {
	cfg := sampled(SAGE)
	cfg.Epochs, cfg.Precision = 1, "bf16"
	_, err := Run(context.Background(), toyDataset(300, 3), cfg, Options{Backend: cpuBackend(t)})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "precision" || !strings.Contains(err.Error(), "bf16") || !strings.Contains(err.Error(), "cpu") {
		t.Fatalf("bf16 run on an fp32 back end: %v", err)
	}
	ds := toyDataset(300, 3)
	f, _ := NewFeatures(ds.Features, 300, ds.FeatDim, RowNormAuto)
	if _, err := NewEvaluator(cpuBackend(t), ds, ds.InGraph(), f, cfg.Common); !errors.As(err, &ce) || ce.Field != "precision" {
		t.Fatalf("bf16 evaluator on an fp32 back end: %v", err)
	}
	cfg.Precision = "fp16"
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "precision" {
		t.Fatalf("precision fp16: %v", err)
	}
	for _, p := range []string{"", "fp32", "tf32", "bf16"} {
		cfg.Precision = p
		if err := cfg.Validate(); err != nil {
			t.Fatalf("precision %q: %v", p, err)
		}
	}
	cfg.Precision = ""
	tf, err := cpu.New(cpu.Options{Precision: backend.TF32})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(context.Background(), toyDataset(300, 3), cfg, Options{Backend: tf}); err != nil || rep.Config.Precision != "tf32" {
		t.Fatalf("no precision on a tf32 back end: %v", err)
	}
	c := cfg.Common
	if err := c.ResolvePrecision(tf, cpuBackend(t)); !errors.As(err, &ce) || !strings.Contains(err.Error(), "tf32 and fp32") {
		t.Fatalf("devices of two precisions: %v", err)
	}
	if err := c.ResolvePrecision(); !errors.As(err, &ce) {
		t.Fatalf("no devices: %v", err)
	}
	a, b := Defaults(SAGE), Defaults(SAGE)
	a.Precision, b.Precision = "", "fp32" // a checkpoint from before the field
	if d := a.Diff(&b); d != "" {
		t.Fatalf("\"\" and fp32 differ: %s", d)
	}
	b.Precision = "bf16"
	if d := a.Diff(&b); !strings.Contains(d, "precision") {
		t.Fatalf("fp32 and bf16: Diff %q", d)
	}
}

// TestBFloat16Storage: dense features stored as bfloat16 on the back end
// give, bit for bit, the logits of the same rounded values stored as
// float32, through both the batch gather and the whole-graph pass; and a
// bf16 run trains (its losses close to, not equal to, fp32's).
func TestBFloat16Storage(t *testing.T) {
	b, err := cpu.New(cpu.Options{Precision: backend.BF16})
	if err != nil {
		t.Fatal(err)
	}
	ds := denseToy()
	cfg := sampled(SAGE)
	f16, _ := NewFeatures(ds.Features, 300, ds.FeatDim, RowNormAuto)
	f16.Round(backend.BF16)
	f32 := *f16
	f32.BF16 = false // the same values, stored as float32
	model, err := nn.New(b, cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
	if err != nil {
		t.Fatal(err)
	}
	smp, err := newSampler(ds.InGraph(), cfg.Fanouts)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := smp.Sample(ds.Train, sample.Key{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	in16, in32 := &inputs{b: b, f: f16}, &inputs{b: b, f: &f32}
	defer in16.free()
	defer in32.free()
	logits := func(in *inputs, full bool) []float32 {
		tp := autograd.NewTape(b)
		defer tp.Release()
		var out *autograd.Var
		if full {
			blk, err := nn.UploadGraph(b, ds.InGraph())
			if err != nil {
				t.Fatal(err)
			}
			defer blk.Free()
			out, err = in.forwardFull(tp, model, []*nn.Block{blk, blk}, false, 0)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			var cleanup func()
			out, cleanup, err = in.forwardBatch(tp, model, mb, true, 5)
			defer cleanup()
			if err != nil {
				t.Fatal(err)
			}
		}
		v := make([]float32, out.Len())
		if err := b.Download(v, out.Value); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, full := range []bool{false, true} {
		a, c := logits(in16, full), logits(in32, full)
		if !sameBits(a, c) {
			t.Fatalf("full=%v: logits from bfloat16 storage differ from float32 storage of the same values", full)
		}
	}
	if in16.xd.DType() != backend.BFloat16 || in32.xd.DType() != backend.Float32 {
		t.Fatalf("stored as %v and %v", in16.xd.DType(), in32.xd.DType())
	}

	cfg.Epochs = 3
	ref, err := Run(context.Background(), ds, cfg, Options{Backend: cpuBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Precision = "bf16"
	got, err := Run(context.Background(), ds, cfg, Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	lr, lg := losses(ref), losses(got)
	for i := range lr {
		if d := math.Abs(lr[i] - lg[i]); d == 0 && i > 0 || d > 0.02*lr[i] {
			t.Fatalf("batch %d: loss %v at bf16, %v at fp32: want close but not equal", i, lg[i], lr[i])
		}
	}
	if got.Config.Precision != "bf16" {
		t.Fatalf("report precision %q", got.Config.Precision)
	}
}

// TestResumeKeepsPrecision: a checkpoint records the precision a run
// resolved and resumes at that precision only (TestPrecisionChecked:
// an older checkpoint's empty precision compares as fp32).
func TestResumeKeepsPrecision(t *testing.T) {
	cfg := sampled(GCN)
	cfg.Epochs = 2
	dir := t.TempDir()
	quietRun(t, cfg, Options{CheckpointDir: dir}) // precision "" on fp32: recorded as fp32
	bf, err := cpu.New(cpu.Options{Precision: backend.BF16})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Epochs = 3
	_, err = Run(context.Background(), toyDataset(300, 3), cfg, Options{Backend: bf, CheckpointDir: dir, Resume: true})
	var ce *CheckpointError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "precision is bf16") {
		t.Fatalf("resuming an fp32 checkpoint at bf16: %v", err)
	}
	cfg.Precision = "fp32"
	if rep := quietRun(t, cfg, Options{CheckpointDir: dir, Resume: true}); len(rep.Epochs) != 3 {
		t.Fatalf("resumed at fp32: %d epochs", len(rep.Epochs))
	}
}

// TestRoundIntoParts checks the parallel rounding over several blocks,
// into a new slice (the source kept) and in place.
func TestRoundIntoParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	n := 5*scanBlock + 7
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i)*1.000123 + 0.3
	}
	orig := append([]float32(nil), src...)
	dst := make([]float32, n)
	roundInto(dst, src, backend.BF16)
	if !sameBits(src, orig) {
		t.Fatal("roundInto modified its source")
	}
	for i, v := range dst {
		if want := backend.RoundBF16(orig[i]); math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("value %d = %v, want %v", i, v, want)
		}
	}
	roundInto(src, src, backend.BF16)
	if !sameBits(src, dst) {
		t.Fatal("in place differs from into a new slice")
	}
}
