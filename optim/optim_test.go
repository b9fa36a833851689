package optim_test

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func setup(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func param(t *testing.T, b backend.Backend, name string, v []float32) *nn.Param {
	t.Helper()
	p, err := nn.NewParam(b, name, 1, len(v))
	must(t, err)
	must(t, b.Upload(p.Value, v))
	return p
}

func values(t *testing.T, b backend.Backend, x backend.Buffer) []float32 {
	t.Helper()
	out := make([]float32, x.Len())
	must(t, b.Download(out, x))
	return out
}

// grads returns a deterministic gradient for step s.
func gradAt(s, i int) float32 { return float32(math.Sin(float64(3*s + i))) }

func setGrads(t *testing.T, b backend.Backend, ps []*nn.Param, s int) {
	t.Helper()
	for _, p := range ps {
		g := make([]float32, p.Len())
		for i := range g {
			g[i] = gradAt(s, i)
		}
		must(t, b.Upload(p.Grad, g))
	}
}

// TestAdamMatchesTorchFormula compares 5 steps with a float64 host
// implementation of torch.optim.Adam (L2 weight decay).
func TestAdamMatchesTorchFormula(t *testing.T) {
	b := setup(t)
	init := []float32{0.5, -1, 2, 0}
	p := param(t, b, "w", init)
	const lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.1
	a := optim.NewAdam(b, []*nn.Param{p}, lr, b1, b2, eps, wd)
	defer a.Free()
	ref := make([]float64, len(init))
	m := make([]float64, len(init))
	v := make([]float64, len(init))
	for i := range init {
		ref[i] = float64(init[i])
	}
	for s := 1; s <= 5; s++ {
		setGrads(t, b, []*nn.Param{p}, s)
		must(t, a.Step())
		for i := range ref {
			g := float64(gradAt(s, i)) + wd*ref[i]
			m[i] = b1*m[i] + (1-b1)*g
			v[i] = b2*v[i] + (1-b2)*g*g
			mh := m[i] / (1 - math.Pow(b1, float64(s)))
			vh := v[i] / (1 - math.Pow(b2, float64(s)))
			ref[i] -= lr * mh / (math.Sqrt(vh) + eps)
		}
	}
	got := values(t, b, p.Value)
	for i := range ref {
		if math.Abs(float64(got[i])-ref[i]) > 1e-5 {
			t.Fatalf("param %d = %v, reference %v", i, got[i], ref[i])
		}
	}
	if a.StepCount() != 5 {
		t.Fatalf("step count %d", a.StepCount())
	}
}

func TestSGDMomentumWeightDecay(t *testing.T) {
	b := setup(t)
	init := []float32{1, -2, 0.5}
	p := param(t, b, "w", init)
	const lr, mom, wd = 0.1, 0.9, 0.01
	s := optim.NewSGD(b, []*nn.Param{p}, lr, mom, wd)
	defer s.Free()
	ref := []float64{1, -2, 0.5}
	buf := make([]float64, 3)
	for step := 1; step <= 4; step++ {
		setGrads(t, b, []*nn.Param{p}, step)
		must(t, s.Step())
		for i := range ref {
			g := float64(gradAt(step, i)) + wd*ref[i]
			if step == 1 {
				buf[i] = g // torch: buf = clone(g) on the first step
			} else {
				buf[i] = mom*buf[i] + g
			}
			ref[i] -= lr * buf[i]
		}
	}
	got := values(t, b, p.Value)
	for i := range ref {
		if math.Abs(float64(got[i])-ref[i]) > 1e-5 {
			t.Fatalf("param %d = %v, reference %v", i, got[i], ref[i])
		}
	}
	// Plain SGD keeps no state.
	plain := optim.NewSGD(b, []*nn.Param{p}, 0.5, 0, 0)
	st, err := plain.State()
	must(t, err)
	if len(st.Buffers) != 0 {
		t.Fatalf("plain SGD has %d state buffers", len(st.Buffers))
	}
	must(t, b.Upload(p.Grad, []float32{1, 2, 3}))
	before := values(t, b, p.Value)
	must(t, plain.Step())
	after := values(t, b, p.Value)
	for i := range after {
		if after[i] != before[i]-0.5*float32(i+1) {
			t.Fatalf("plain SGD: %v -> %v", before, after)
		}
	}
}

func TestZeroGrad(t *testing.T) {
	b := setup(t)
	p := param(t, b, "w", []float32{1, 2})
	must(t, b.Upload(p.Grad, []float32{5, 6}))
	a := optim.NewAdam(b, []*nn.Param{p}, 0.1, 0.9, 0.999, 1e-8, 0)
	must(t, a.ZeroGrad())
	if g := values(t, b, p.Grad); g[0] != 0 || g[1] != 0 {
		t.Fatalf("grad after ZeroGrad: %v", g)
	}
}

// TestStateRoundTrip: an optimizer restored from State after k steps
// continues bit-identically to the uninterrupted one.
func TestStateRoundTrip(t *testing.T) {
	for _, kind := range []string{"adam", "sgd"} {
		b := setup(t)
		mk := func(ps []*nn.Param) optim.Optimizer {
			if kind == "adam" {
				return optim.NewAdam(b, ps, 0.01, 0.9, 0.99, 1e-8, 1e-3)
			}
			return optim.NewSGD(b, ps, 0.05, 0.9, 1e-3)
		}
		ps := []*nn.Param{param(t, b, "a", []float32{1, 2, 3}), param(t, b, "b", []float32{-1, 0.5})}
		o := mk(ps)
		for s := 1; s <= 3; s++ {
			setGrads(t, b, ps, s)
			must(t, o.Step())
		}
		st, err := o.State()
		must(t, err)
		saved, err := nn.SaveParams(b, ps)
		must(t, err)
		for s := 4; s <= 6; s++ {
			setGrads(t, b, ps, s)
			must(t, o.Step())
		}
		// Restore into fresh parameters and a fresh optimizer.
		qs := []*nn.Param{param(t, b, "a", []float32{0, 0, 0}), param(t, b, "b", []float32{0, 0})}
		must(t, nn.LoadParams(b, qs, saved))
		r := mk(qs)
		must(t, r.LoadState(st))
		if r.StepCount() != 3 {
			t.Fatalf("%s: restored step count %d", kind, r.StepCount())
		}
		for s := 4; s <= 6; s++ {
			setGrads(t, b, qs, s)
			must(t, r.Step())
		}
		for i := range ps {
			x, y := values(t, b, ps[i].Value), values(t, b, qs[i].Value)
			for j := range x {
				if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
					t.Fatalf("%s: %s[%d] uninterrupted %v, restored %v", kind, ps[i].Name, j, x[j], y[j])
				}
			}
		}
		// Mismatched states are rejected before anything is written.
		var oe *optim.Error
		bad := st
		bad.Buffers = append([]nn.NamedTensor(nil), st.Buffers...)
		bad.Buffers[0].Data = bad.Buffers[0].Data[:1]
		if err := r.LoadState(bad); !errors.As(err, &oe) {
			t.Fatalf("%s: short buffer: %v", kind, err)
		}
		bad.Kind = "other"
		if err := r.LoadState(bad); !errors.As(err, &oe) {
			t.Fatalf("%s: wrong kind: %v", kind, err)
		}
		if r.StepCount() != 6 {
			t.Fatalf("%s: failed LoadState changed the step count to %d", kind, r.StepCount())
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	b := setup(t)
	p := param(t, b, "w", []float32{1})
	var oe *optim.Error
	for name, o := range map[string]optim.Optimizer{
		"beta1":     optim.NewAdam(b, []*nn.Param{p}, 0.1, 1, 0.999, 1e-8, 0),
		"lr":        optim.NewAdam(b, []*nn.Param{p}, float32(math.NaN()), 0.9, 0.999, 1e-8, 0),
		"duplicate": optim.NewSGD(b, []*nn.Param{p, p}, 0.1, 0, 0),
		"nil":       optim.NewSGD(b, []*nn.Param{nil}, 0.1, 0, 0),
		"momentum":  optim.NewSGD(b, []*nn.Param{p}, 0.1, -1, 0),
	} {
		if err := o.Step(); !errors.As(err, &oe) {
			t.Errorf("%s: Step gave %v, want *optim.Error", name, err)
		}
	}
}
