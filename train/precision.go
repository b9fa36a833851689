package train

import (
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// The precision policy (Common.Precision; package backend's doc,
// # Precision): the back ends are opened with the run's precision, which
// sets what their matrix products round their inputs to; at bf16 the
// trainers also round the input features to bfloat16 (Features.Round)
// and keep them as bfloat16 on the devices that gather from them, so a
// batch's rows cost half the bytes. Weights, gradients and optimizer
// state stay float32 (float32 master weights); bfloat16 has float32's
// exponent range, so no loss scaling is needed.

// Prec is c.Precision parsed ("" is fp32; Validate rejects the rest).
func (c *Common) Prec() backend.Precision {
	p, _ := backend.ParsePrecision(c.Precision)
	return p
}

// ResolvePrecision checks c's precision against the back ends bs the
// run computes on and returns a *ConfigError (field precision) when one
// of them was opened with another (the products would silently run in
// it). An empty Precision takes the back ends' (which must agree) and is
// set to it, so reports and checkpoints name the precision the run had.
func (c *Common) ResolvePrecision(bs ...backend.Backend) error {
	bad := func(format string, args ...any) error {
		return &ConfigError{Field: "precision", Msg: fmt.Sprintf(format, args...)}
	}
	if len(bs) == 0 || bs[0] == nil {
		return bad("no back end to compute on")
	}
	if c.Precision == "" {
		p := bs[0].Precision()
		for _, b := range bs[1:] {
			if b != nil && b.Precision() != p {
				return bad("devices %s and %s were opened with precisions %s and %s", bs[0].Name(), b.Name(), p, b.Precision())
			}
		}
		c.Precision = p.String()
		return nil
	}
	want := c.Prec()
	for _, b := range bs {
		if err := backend.CheckPrecision(b, want); err != nil {
			var pe *backend.PrecisionError
			if errors.As(err, &pe) {
				return bad("%s, but device %s was opened with %s (open the back ends with the run's precision)", want, pe.Device, pe.Have)
			}
			return bad("%v", err)
		}
	}
	return nil
}

// Round applies precision p to the features: at BF16 every value is
// rounded to bfloat16 (to nearest, ties to even) and BF16 is set, so the
// trainers store them as bfloat16 on devices; other precisions leave them
// as they are. The caller's matrix (NewFeatures' x) is never modified:
// dense rows that still alias it are copied first.
func (f *Features) Round(p backend.Precision) {
	if p != backend.BF16 || f.BF16 {
		return
	}
	f.BF16 = true
	if h := f.Sparse; h != nil {
		// Values are the features' own (HostSparseFromDense made them).
		roundInto(h.Values, h.Values, backend.BF16)
		return
	}
	src := f.Dense
	if !f.ownDense {
		f.Dense = make([]float32, len(src))
		f.ownDense = true
	}
	roundInto(f.Dense, src, backend.BF16)
}

// roundInto writes src rounded to p into dst (len(dst) == len(src); they
// may be the same slice), in blocks spread over GOMAXPROCS goroutines
// (scanChunks): a papers-size table (14 G values) took 80 s on one core,
// copy included.
func roundInto(dst, src []float32, p backend.Precision) {
	scanChunks(len(src), func(lo, hi int) bool {
		for i, x := range src[lo:hi] {
			dst[lo+i] = p.Round(x)
		}
		return true
	})
}
