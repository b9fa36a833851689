package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestClassify: the classes equal a host argmax (ties to the lower
// class), the listed rows' logits come back in order, and bad input is
// refused.
func TestClassify(t *testing.T) {
	b := newCPU(t)
	const n, c = 300, 7
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, n*c)
	for i := range logits {
		logits[i] = float32(r.IntN(5)) // many ties
	}
	buf, err := b.Alloc(backend.Float32, n*c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(buf)
	if err := b.Upload(buf, logits); err != nil {
		t.Fatal(err)
	}
	rows := []int32{5, 0, 299, 5}
	class, listed, err := nn.Classify(b, buf, n, c, rows)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		row := logits[i*c : (i+1)*c]
		want := slices.Index(row, slices.Max(row))
		if int(class[i]) != want {
			t.Fatalf("row %d: class %d, want %d (%v)", i, class[i], want, row)
		}
	}
	for i, v := range rows {
		if !slices.Equal(listed[i*c:(i+1)*c], logits[int(v)*c:int(v+1)*c]) {
			t.Fatalf("listed row %d (node %d) differs", i, v)
		}
	}
	if _, l, err := nn.Classify(b, buf, n, c, nil); err != nil || l != nil {
		t.Fatalf("no listed rows: %v, %v", l, err)
	}
	for name, f := range map[string]func() error{
		"row out of range": func() error { _, _, err := nn.Classify(b, buf, n, c, []int32{n}); return err },
		"negative row":     func() error { _, _, err := nn.Classify(b, buf, n, c, []int32{-1}); return err },
		"wrong shape":      func() error { _, _, err := nn.Classify(b, buf, n, c+1, nil); return err },
		"no classes":       func() error { _, _, err := nn.Classify(b, buf, n*c, 0, nil); return err },
		"nil logits":       func() error { _, _, err := nn.Classify(b, nil, n, c, nil); return err },
	} {
		if f() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestArgmaxCrossEntropy: ties to the lowest column, NaN ignored, and the
// cross-entropy equals -log softmax computed directly in float64.
func TestArgmaxCrossEntropy(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		row  []float32
		want int
	}{{[]float32{1, 3, 3, 2}, 1}, {[]float32{nan, 2, nan, 5}, 3}, {[]float32{nan}, 0}, {nil, 0}, {[]float32{-1, -1}, 0}} {
		if got := nn.Argmax(c.row); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.row, got, c.want)
		}
	}
	row := []float32{0.5, -2, 3.25, 1}
	var z float64
	for _, x := range row {
		z += math.Exp(float64(x))
	}
	for label := range row {
		want := -math.Log(math.Exp(float64(row[label])) / z)
		if got := nn.CrossEntropy(row, int32(label)); math.Abs(got-want) > 1e-12 {
			t.Errorf("CrossEntropy(label %d) = %v, want %v", label, got, want)
		}
	}
	// Large logits: the shift keeps it finite.
	if got := nn.CrossEntropy([]float32{1000, 0}, 1); math.Abs(got-1000) > 1e-9 {
		t.Errorf("CrossEntropy of large logits = %v, want 1000", got)
	}
}
