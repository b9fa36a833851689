package devbuf

import (
	"strings"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func TestViewAndUpload(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := Upload(b, []float32{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	v, err := View(buf, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Fill(v, 9); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 5)
	if err := b.Download(got, buf); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 9, 9, 9, 5}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("after filling the view: %v, want %v", got, want)
		}
	}
	ib, err := Upload(b, []int32{7, 8})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := View(ib, 2, 0); err != nil || e.Len() != 0 {
		t.Fatalf("empty view at the end: %v, %v", e, err)
	}
	for _, c := range [][2]int{{-1, 1}, {0, 3}, {3, 0}, {1, -1}} {
		if _, err := View(ib, c[0], c[1]); err == nil {
			t.Fatalf("View(%d, %d) of 2 elements: no error", c[0], c[1])
		}
	}
	if _, err := View(nil, 0, 0); err == nil {
		t.Fatal("View of nil: no error")
	}
}

// TestFenceOnCPU: a fence of the CPU back end is reached at once and
// closes twice; a back end without fences is refused by name.
func TestFenceOnCPU(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFence(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Record(); err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := NewFence(nil); err == nil {
		t.Fatal("fence on nil: no error")
	}
	if _, err := NewFence(noFences{b}); err == nil || !strings.Contains(err.Error(), "no fences") {
		t.Fatalf("fence on a back end without fences: %v", err)
	}
}

// noFences hides the CPU back end's capabilities.
type noFences struct{ backend.Backend }

// TestInt64AndEdges: int64 buffers take views and uploads; an empty
// upload allocates an empty buffer; another back end's buffer is
// refused.
func TestInt64AndEdges(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := Upload(b, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	v, err := View(lb, 1, 2)
	if err != nil || v.Len() != 2 || cpu.I64(v.(*cpu.Buffer))[1] != 3 {
		t.Fatalf("int64 view: %v, %v", v, err)
	}
	e, err := Upload(b, []int32{})
	if err != nil || e.Len() != 0 {
		t.Fatalf("empty upload: %v, %v", e, err)
	}
	if _, err := View(otherBuffer{}, 0, 1); err == nil {
		t.Fatal("a view of another back end's buffer: no error")
	}
}

// otherBuffer is a buffer of neither the CPU nor the CUDA back end.
type otherBuffer struct{}

func (otherBuffer) DType() backend.DType { return backend.Float32 }
func (otherBuffer) Len() int             { return 4 }
