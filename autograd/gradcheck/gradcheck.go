// Package gradcheck compares the gradients computed by the autograd tape
// (and by the nn layers built on it) with central finite differences, on
// any back end. It uses only the backend.Backend interface, so the CPU and
// CUDA back ends run the same suite: call Run from a _test.go.
//
// # Numerics
//
// Finite differences are taken in float32 on the back end under test (no
// float64 reference re-implementation): the scalar checked is
// L = sum_k out_k * R_k for a fixed random R, evaluated in float64 on the
// host from the downloaded float32 output. Inputs are O(1) and the step is
// h = 1e-2, so the rounding error of the difference quotient is about
// 1e-7*|L|/h ~ 1e-5..1e-4 and the truncation error h^2/6*|f”'| ~ 2e-5;
// an element passes when |num - ana| <= 1e-3 + 1e-2*max(|num|, |ana|).
//
// Piecewise-linear ops (ReLU, LeakyReLU inside GAT) have kinks: when x is
// within h of a kink the central difference straddles it. Such an element
// still passes when one of the two one-sided differences (which do not
// straddle it) matches within 1e-2 + 5e-2*max(...) (their truncation error
// is h/2*|f”|); at most a quarter of a tensor's elements (or one element) may rely on
// this, so a wrong gradient cannot hide behind it. Whole models, with ReLU
// between layers, are checked with the smaller step ModelStep = 1e-3.
package gradcheck

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Tolerances and default step documented in the package comment.
const (
	Step = 1e-2
	// ModelStep is the step for whole models: ReLU between layers puts
	// kinks everywhere, and a smaller step crosses fewer of them; the
	// scalar loss keeps the rounding error small (~1e-7/1e-3).
	ModelStep  = 1e-3
	ATol       = 1e-3
	RTol       = 1e-2
	OneSidedAT = 1e-2
	OneSidedRT = 5e-2
)

// Tensor is a back-end matrix the checked function reads. Grad non-nil
// marks it as differentiated: Check compares the tape's gradient (which
// the function must accumulate into Grad, e.g. through Tape.Leaf(Value,
// Grad, ...) or nn.Param.Var) with finite differences of every element.
type Tensor struct {
	Name        string
	Value, Grad backend.Buffer
	Rows, Cols  int
}

// Func builds the checked computation on a fresh tape and returns its
// output (any shape). It must be deterministic (fixed dropout seeds).
type Func func(t *autograd.Tape) (*autograd.Var, error)

// Result summarizes one Check.
type Result struct {
	Elements int     // elements compared
	OneSided int     // elements accepted by a one-sided difference
	MaxAbs   float64 // largest |num - ana| over central-difference passes
}

// Check runs f forward and backward once, then perturbs every element of
// every tensor with a Grad by +-Step and compares. It returns an error
// naming the first tensor and element that disagree.
func Check(b backend.Backend, tensors []Tensor, f Func, seed uint64) (Result, error) {
	return CheckStep(b, tensors, f, seed, Step)
}

// CheckStep is Check with finite-difference step h.
func CheckStep(b backend.Backend, tensors []Tensor, f Func, seed uint64, h float32) (Result, error) {
	var res Result
	for _, tn := range tensors {
		if tn.Grad != nil {
			if err := b.Fill(tn.Grad, 0); err != nil {
				return res, err
			}
		}
	}
	// Analytic gradients of L = <out, R>.
	tape := autograd.NewTape(b)
	defer tape.Release()
	out, err := f(tape)
	if err != nil {
		return res, fmt.Errorf("forward: %w", err)
	}
	n := out.Len()
	r := make([]float32, n)
	s := rng.NewStream(seed)
	for i := range r {
		r[i] = 2*s.Uniform01() - 1
	}
	flat, err := tape.Reshape(out, 1, n)
	if err != nil {
		return res, err
	}
	rv, err := tape.Upload(r, n, 1)
	if err != nil {
		return res, err
	}
	loss, err := tape.MatMul(flat, rv)
	if err != nil {
		return res, err
	}
	if !loss.RequiresGrad {
		return res, fmt.Errorf("output does not depend on any checked tensor")
	}
	if err := tape.Backward(loss); err != nil {
		return res, fmt.Errorf("backward: %w", err)
	}
	tape.Release()

	eval := func() (float64, error) {
		tp := autograd.NewTape(b)
		defer tp.Release()
		o, err := f(tp)
		if err != nil {
			return 0, err
		}
		if o.Len() != n {
			return 0, fmt.Errorf("output size changed from %d to %d", n, o.Len())
		}
		host := make([]float32, n)
		if err := b.Download(host, o.Value); err != nil {
			return 0, err
		}
		var l float64
		for i, v := range host {
			l += float64(v) * float64(r[i])
		}
		return l, nil
	}
	l0, err := eval()
	if err != nil {
		return res, err
	}
	for _, tn := range tensors {
		if tn.Grad == nil {
			continue
		}
		m := tn.Rows * tn.Cols
		ana := make([]float32, m)
		if err := b.Download(ana, tn.Grad); err != nil {
			return res, err
		}
		val := make([]float32, m)
		if err := b.Download(val, tn.Value); err != nil {
			return res, err
		}
		oneSided := 0
		for k := 0; k < m; k++ {
			orig := val[k]
			perturbed := func(x float32) (float64, error) {
				val[k] = x
				if err := b.Upload(tn.Value, val); err != nil {
					return 0, err
				}
				return eval()
			}
			lp, err := perturbed(orig + h)
			if err != nil {
				return res, err
			}
			lm, err := perturbed(orig - h)
			if err != nil {
				return res, err
			}
			val[k] = orig
			if err := b.Upload(tn.Value, val); err != nil {
				return res, err
			}
			// The step actually taken in float32.
			hp := float64(orig+h) - float64(orig)
			hm := float64(orig) - float64(orig-h)
			a := float64(ana[k])
			num := (lp - lm) / (hp + hm)
			res.Elements++
			if close(num, a, ATol, RTol) {
				res.MaxAbs = math.Max(res.MaxAbs, math.Abs(num-a))
				continue
			}
			fwd, bwd := (lp-l0)/hp, (l0-lm)/hm
			if close(fwd, a, OneSidedAT, OneSidedRT) || close(bwd, a, OneSidedAT, OneSidedRT) {
				oneSided++
				res.OneSided++
				continue
			}
			return res, fmt.Errorf("%s[%d] (row %d, col %d): tape gradient %.6g, central difference %.6g (one-sided %.6g / %.6g)",
				tn.Name, k, k/max(tn.Cols, 1), k%max(tn.Cols, 1), a, num, fwd, bwd)
		}
		if oneSided > max(1, m/4) {
			return res, fmt.Errorf("%s: %d of %d elements only match a one-sided difference", tn.Name, oneSided, m)
		}
	}
	return res, nil
}

func close(num, ana, atol, rtol float64) bool {
	return math.Abs(num-ana) <= atol+rtol*math.Max(math.Abs(num), math.Abs(ana))
}
