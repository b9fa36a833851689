package staged_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// group opens n communicators of be's buffers staged through inproc.
func group(be backend.Backend) commtest.NewGroup {
	return func(n int, o comm.Options) ([]comm.Comm, error) {
		hs, err := inproc.New(n, o)
		if err != nil {
			return nil, err
		}
		ds := make([]comm.Comm, n)
		for r, h := range hs {
			ds[r] = staged.Open(h, be, o)
		}
		return ds, nil
	}
}

func cpuBackend(t *testing.T) backend.Backend {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// The suites on the CPU back end, whose buffers go to the host
// communicator as they are.

func TestConformance(t *testing.T) {
	be := cpuBackend(t)
	commtest.Conformance(t, be, group(be))
}

func TestConformanceAlloc(t *testing.T) {
	be := cpuBackend(t)
	commtest.ConformanceAlloc(t, be, group(be))
}

func TestFaults(t *testing.T) {
	be := cpuBackend(t)
	commtest.Faults(t, be, group(be), nil)
}

// TestStagedCopies runs cases on buffers of a back end that is not host
// memory (hostOnly: a CPU back end whose buffers the host communicator
// does not take), so every operation downloads, runs the host collective
// and uploads.
func TestStagedCopies(t *testing.T) {
	c, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be := &notHost{Backend: c}
	const n = 3
	cs, err := group(be)(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	err = commtest.RunLocalRanks(n, func(r int) error {
		return commtest.RunProgram(context.Background(), cs[r], be, []int{0, 1, 7, 1000}, 3)
	})
	if err != nil {
		t.Fatal(err)
	}
	if be.downloads.Load() == 0 || be.uploads.Load() == 0 {
		t.Fatalf("%d downloads and %d uploads: the buffers were not staged", be.downloads.Load(), be.uploads.Load())
	}
}

// notHost is a CPU back end whose buffers are wrapped in boxed, which
// is not a CPU buffer: the host communicator refuses it, so the staged
// transport must copy.
type notHost struct {
	*cpu.Backend
	uploads, downloads atomic.Int64
}

type boxed struct{ backend.Buffer }

func (b *notHost) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	x, err := b.Backend.Alloc(dt, n)
	if err != nil {
		return nil, err
	}
	return boxed{x}, nil
}

func (b *notHost) Free(x backend.Buffer) {
	if bx, ok := x.(boxed); ok {
		b.Backend.Free(bx.Buffer)
	}
}

// Owns takes the boxed buffers (staged.CheckBuffer asks).
func (b *notHost) Owns(x backend.Buffer) bool {
	_, ok := x.(boxed)
	return ok
}

func (b *notHost) Upload(dst backend.Buffer, src any) error {
	b.uploads.Add(1)
	return b.Backend.Upload(dst.(boxed).Buffer, src)
}

func (b *notHost) Download(dst any, src backend.Buffer) error {
	b.downloads.Add(1)
	return b.Backend.Download(dst, src.(boxed).Buffer)
}

func TestCheckAndOverlap(t *testing.T) {
	be, _ := cpu.New(cpu.Options{})
	x := make([]float32, 10)
	a, b, c := cpu.WrapF32(x[:6]), cpu.WrapF32(x[5:]), cpu.WrapF32(x[6:])
	tr := staged.New(nil, be, "staged")
	if !tr.Overlap(a, b) || tr.Overlap(a, c) || !tr.Overlap(a, a) {
		t.Error("Overlap")
	}
	if err := staged.CheckBuffer(be, a); err != nil {
		t.Error(err)
	}
	var foreign backend.Buffer = fakeBuf{}
	if err := staged.CheckBuffer(be, foreign); err == nil {
		t.Error("a foreign buffer passed")
	}
	if tr.Backend() != be {
		t.Error("Backend")
	}
}

type fakeBuf struct{}

func (fakeBuf) Len() int             { return 1 }
func (fakeBuf) DType() backend.DType { return backend.Float32 }
