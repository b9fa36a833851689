package cuda

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

func TestCapabilities(t *testing.T) {
	backendtest.Capabilities(t, gpu(t), "Slicer", "Siblings", "Fences", "PinnedMemory", "SparseBuilder", "Memory", "Kernels", "Enqueuer", "Fused")
}

// capSrc is a kernel for the launch test: y = a*x + b + (m ? *m : 0),
// and an index check of idx against [0, limit).
const capSrc = `
extern "C" __global__ void cap_axpb(float* y, const float* x, i64 n, float a, int b, const i64* m) {
  GRID_STRIDE(i, n) y[i] = a * x[i] + (float)b + (m ? (float)m[0] : 0.0f);
}
extern "C" __global__ void cap_check(const int* idx, i64 n, int limit, u64* slot) {
  GRID_STRIDE(i, n) if (idx[i] < 0 || idx[i] >= limit) index_error(slot, i);
}
`

func TestCapKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, CommonSource()+capSrc, "captest.cu")
}

// TestLaunchKernels launches a kernel of another package's source through
// the capabilities alone: buffers (a view among them), scalars of each
// width, mapped host memory by address, a nil buffer as 0, and an index
// check; foreign buffers are refused before anything is queued.
func TestLaunchKernels(t *testing.T) {
	var d backend.Backend = gpu(t)
	ks := d.(backend.Kernels)
	m, err := ks.LoadKernels("captest", capSrc)
	if err != nil {
		t.Fatal(err)
	}
	axpb, err := m.Kernel("cap_axpb")
	if err != nil {
		t.Fatal(err)
	}
	check, err := m.Kernel("cap_check")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Kernel("nope"); err == nil {
		t.Error("a kernel that is not in the module: no error")
	}
	if m2, err := ks.LoadKernels("captest", "ignored: cached by name"); err != nil || m2 != m {
		t.Errorf("loading the name again: %v, %v", m2, err)
	}
	h, err := d.(backend.PinnedMemory).AllocPinned(8, true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	h.Int64s()[0] = 7
	x, _ := d.Alloc(backend.Float32, 4)
	d.Upload(x, []float32{1, 2, 3, 4})
	y, _ := d.Alloc(backend.Float32, 6)
	defer d.Free(x)
	defer d.Free(y)
	yv, err := backend.View(y, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := d.Alloc(backend.Int32, 3)
	d.Upload(idx, []int32{0, 5, -1})
	defer d.Free(idx)
	host := cpu.WrapF32([]float32{1})
	err = d.(backend.Enqueuer).Enqueue(func(q backend.Queue) error {
		if err := q.Launch(axpb, 4, backend.Buf(yv), backend.Buf(x), backend.I64(4), backend.F32(2.5), backend.I32(-1), backend.Addr(h.DeviceAddr())); err != nil {
			return err
		}
		if err := q.Launch(axpb, 2, backend.Buf(y), backend.Buf(x), backend.I64(2), backend.F32(1), backend.I32(0), backend.Buf(nil)); err != nil {
			return err
		}
		var se *backend.ShapeError
		if err := q.Launch(axpb, 1, backend.Buf(host), backend.Buf(x), backend.I64(1), backend.F32(1), backend.I32(0), backend.Buf(nil)); !errors.As(err, &se) {
			t.Errorf("launch with a cpu buffer: %v", err)
		}
		if _, err := q.IndexSlot("cap", "idx", host, 1); !errors.As(err, &se) {
			t.Errorf("index slot over a cpu buffer: %v", err)
		}
		slot, err := q.IndexSlot("cap", "idx", idx, 3)
		if err != nil {
			return err
		}
		return q.Launch(check, 3, backend.Buf(idx), backend.I64(3), backend.I32(3), backend.U64(slot))
	})
	if err != nil {
		t.Fatal(err)
	}
	var ie *backend.IndexError
	if err := d.Synchronize(); !errors.As(err, &ie) || ie.Pos != 1 || ie.Value != 5 || ie.Limit != 3 {
		t.Fatalf("index check: %v", err)
	}
	got := make([]float32, 6)
	if err := d.Download(got, y); err != nil {
		t.Fatal(err)
	}
	// y[0:2] = x[0:2]; y[2:6] = 2.5*x - 1 + 7.
	if want := []float32{1, 2, 8.5, 11, 13.5, 16}; !slices.Equal(got, want) {
		t.Fatalf("y = %v, want %v", got, want)
	}
}

// TestOOMErrorIs: code above the back end recognizes running out of
// device memory without naming *OOMError.
func TestOOMErrorIs(t *testing.T) {
	var err error = fmt.Errorf("evaluation: %w", &OOMError{Device: "cuda:0", Requested: 1 << 40})
	if !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("%v does not match backend.ErrOutOfMemory", err)
	}
	if errors.Is(errors.New("other"), backend.ErrOutOfMemory) {
		t.Fatal("an unrelated error matches backend.ErrOutOfMemory")
	}
}
