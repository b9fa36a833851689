package backend

import (
	"fmt"
	"math"
	"strings"
)

// Precision is a back end's arithmetic policy for matrix products and the
// storage of input features (see the package doc, # Precision). The zero
// value is FP32, the default and the reference.
type Precision uint8

const (
	// FP32: every product in float32 (the reference).
	FP32 Precision = iota
	// TF32: Gemm rounds its inputs to TF32 (10-bit mantissa) and
	// accumulates in float32 (tensor cores on CUDA).
	TF32
	// BF16: Gemm rounds its inputs to bfloat16 (7-bit mantissa) and
	// accumulates in float32; trainers store input features as BFloat16.
	BF16
)

// Precisions lists every precision, FP32 first.
var Precisions = []Precision{FP32, TF32, BF16}

func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case TF32:
		return "tf32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// Valid reports whether p is one of Precisions.
func (p Precision) Valid() bool { return p <= BF16 }

// ParsePrecision reads "fp32", "tf32" or "bf16" (case-insensitive); ""
// is FP32.
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "fp32":
		return FP32, nil
	case "tf32":
		return TF32, nil
	case "bf16":
		return BF16, nil
	}
	return FP32, fmt.Errorf("backend: precision %q: want fp32, tf32 or bf16", s)
}

// Round rounds x to the format p's matrix products read their inputs in:
// x itself for FP32, RoundTF32 or RoundBF16.
func (p Precision) Round(x float32) float32 {
	switch p {
	case TF32:
		return RoundTF32(x)
	case BF16:
		return RoundBF16(x)
	}
	return x
}

// RoundSlice rounds every element of dst (in place) as Round does.
func (p Precision) RoundSlice(dst []float32) {
	if p == FP32 || !p.Valid() {
		return
	}
	for i, x := range dst {
		dst[i] = p.Round(x)
	}
}

// roundBits rounds the float32 x to nearest, ties to even, keeping its top
// 32-drop bits (sign, exponent and 23-drop mantissa bits); NaN stays a
// (quiet) NaN, infinities stay, and a value past the format's largest
// finite rounds to infinity, as IEEE rounding does.
func roundBits(x float32, drop uint) uint32 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a NaN after truncation
		return b | 0x00400000
	}
	half := uint32(1)<<(drop-1) - 1
	b += half + (b>>drop)&1
	return b &^ (uint32(1)<<drop - 1)
}

// RoundTF32 rounds x to TF32 (1 sign, 8 exponent, 10 mantissa bits), to
// nearest with ties to even; the result is a float32.
func RoundTF32(x float32) float32 { return math.Float32frombits(roundBits(x, 13)) }

// RoundBF16 rounds x to bfloat16 (1 sign, 8 exponent, 7 mantissa bits),
// to nearest with ties to even; the result is a float32.
func RoundBF16(x float32) float32 { return math.Float32frombits(roundBits(x, 16)) }

// BF16Bits returns the bfloat16 encoding of x (RoundBF16's top 16 bits):
// what a BFloat16 buffer stores for x.
func BF16Bits(x float32) uint16 { return uint16(roundBits(x, 16) >> 16) }

// BF16Value returns the float32 a bfloat16 encoding stands for (exact).
func BF16Value(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ToBF16 encodes src into dst (len(dst) >= len(src)) with BF16Bits.
func ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = BF16Bits(x)
	}
}

// FromBF16 decodes src into dst (len(dst) >= len(src)) with BF16Value.
func FromBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = BF16Value(h)
	}
}

// PrecisionError reports a back end opened with another precision than
// the run asks for.
type PrecisionError struct {
	Device     string
	Have, Want Precision
}

func (e *PrecisionError) Error() string {
	return fmt.Sprintf("backend: %s was opened with precision %s, the run asks for %s (open it with Precision %s)", e.Device, e.Have, e.Want, e.Want)
}

// CheckPrecision returns a *PrecisionError when b's precision is not want.
func CheckPrecision(b Backend, want Precision) error {
	if b == nil {
		return fmt.Errorf("backend: nil back end (precision %s wanted)", want)
	}
	if have := b.Precision(); have != want {
		return &PrecisionError{Device: b.Name(), Have: have, Want: want}
	}
	return nil
}
