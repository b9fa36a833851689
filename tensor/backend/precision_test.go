package backend

import (
	"math"
	"testing"
)

func TestParsePrecision(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Precision
		ok   bool
	}{
		{"", FP32, true}, {"fp32", FP32, true}, {"tf32", TF32, true}, {"bf16", BF16, true}, {" BF16 ", BF16, true},
		{"fp16", FP32, false}, {"bfloat16", FP32, false}, {"32", FP32, false},
	} {
		got, err := ParsePrecision(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
		if err == nil && c.in != "" && got.String() != c.want.String() {
			t.Errorf("String of %v = %q", got, got.String())
		}
	}
	for _, p := range Precisions {
		if q, err := ParsePrecision(p.String()); err != nil || q != p || !p.Valid() {
			t.Errorf("%v does not round-trip through its name: %v, %v", p, q, err)
		}
	}
	if Precision(3).Valid() || Precision(3).String() != "precision(3)" {
		t.Errorf("precision 3: valid %v, %q", Precision(3).Valid(), Precision(3).String())
	}
}

// refRound rounds x to a format keeping 23-drop mantissa bits, to
// nearest with ties to even, by comparing x with its two neighbours in
// float64 (exact for float32 inputs).
func refRound(x float32, drop uint) float32 {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return x
	}
	b := math.Float32bits(x)
	mask := uint32(1)<<drop - 1
	lo := b &^ mask // towards zero
	if lo == b {
		return x
	}
	// The next value away from zero in the format; past the largest
	// finite one it is 2^128, which rounds to infinity.
	hiBits := lo + mask + 1
	lov := math.Abs(float64(math.Float32frombits(lo)))
	var hiv float64
	if hiBits&0x7f800000 == 0x7f800000 {
		hiv = math.Ldexp(1, 128)
	} else {
		hiv = math.Abs(float64(math.Float32frombits(hiBits)))
	}
	ax := math.Abs(float64(x))
	pick := lo
	switch dl, dh := ax-lov, hiv-ax; {
	case dh < dl, dh == dl && (lo>>drop)&1 == 1:
		pick = hiBits
	}
	return math.Float32frombits(pick)
}

func checkRound(t *testing.T, x float32) {
	t.Helper()
	for _, c := range []struct {
		name string
		drop uint
		got  float32
	}{{"RoundTF32", 13, RoundTF32(x)}, {"RoundBF16", 16, RoundBF16(x)}} {
		want := refRound(x, c.drop)
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(c.got)) {
				t.Fatalf("%s(NaN %#x) = %v, want a NaN", c.name, math.Float32bits(x), c.got)
			}
			continue
		}
		if math.Float32bits(c.got) != math.Float32bits(want) {
			t.Fatalf("%s(%v = %#08x) = %#08x, want %#08x", c.name, x, math.Float32bits(x), math.Float32bits(c.got), math.Float32bits(want))
		}
		if low := math.Float32bits(c.got) & (1<<c.drop - 1); low != 0 {
			t.Fatalf("%s(%v) = %#08x keeps dropped bits", c.name, x, math.Float32bits(c.got))
		}
	}
	h := BF16Bits(x)
	if v := BF16Value(h); math.Float32bits(v) != math.Float32bits(RoundBF16(x)) && !math.IsNaN(float64(x)) {
		t.Fatalf("BF16Value(BF16Bits(%v)) = %v, want RoundBF16 %v", x, v, RoundBF16(x))
	}
}

func TestRound(t *testing.T) {
	for _, bits := range []uint32{
		0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, // zeros, infinities, NaNs
		0x00000001, 0x0000ffff, 0x00008000, 0x00018000, 0x807fffff, // subnormals, ties among them
		0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // 1 and bfloat16 ties around it
		0x3f801000, 0x3f803000, 0x3f801001, // TF32 ties
		0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7fffff, 0x7f7ff000, // the largest finite values
	} {
		checkRound(t, math.Float32frombits(bits))
	}
	for i := uint32(0); i < 1<<20; i++ {
		checkRound(t, math.Float32frombits(i*4099+0x12345))
	}
	if RoundBF16(1.0/3) != 0.333984375 || RoundTF32(1.0/3) != 0.33325195 {
		t.Errorf("1/3 rounds to %v (bf16), %v (tf32)", RoundBF16(1.0/3), RoundTF32(1.0/3))
	}
	x := []float32{1.0 / 3, 2, -0.1}
	FP32.RoundSlice(x)
	if x[0] != 1.0/3 {
		t.Errorf("FP32.RoundSlice changed %v", x)
	}
	BF16.RoundSlice(x)
	enc := make([]uint16, 3)
	ToBF16(enc, x)
	dec := make([]float32, 3)
	FromBF16(dec, enc)
	for i := range x {
		if dec[i] != x[i] || x[i] != RoundBF16(x[i]) {
			t.Errorf("bfloat16 round trip of %v: %v", x[i], dec[i])
		}
	}
}

func FuzzRound(f *testing.F) {
	for _, b := range []uint32{0, 0x3f808000, 0x7f7fffff, 0x7fc00000, 0x00008000, 0xbeaaaaab} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, bits uint32) { checkRound(t, math.Float32frombits(bits)) })
}
