package staged_test

import (
	"context"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// envs returns the per-rank environments of n goroutine ranks whose
// device communicators stage CPU back-end buffers through inproc.
func envs(t *testing.T, n int) []commtest.DeviceEnv {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opens := commtest.LocalOpeners(n, func(o comm.Options) ([]comm.DeviceComm, error) {
		hs, err := inproc.New(n, o)
		if err != nil {
			return nil, err
		}
		ds := make([]comm.DeviceComm, n)
		for r, h := range hs {
			ds[r] = staged.Open(h, be, o)
		}
		return ds, nil
	})
	bar := commtest.LocalBarrier(n)
	es := make([]commtest.DeviceEnv, n)
	for r := range es {
		es[r] = commtest.DeviceEnv{Rank: r, Size: n, Backend: be, Open: opens[r], Barrier: bar, Exact: true, Logf: t.Logf}
	}
	return es
}

func TestDeviceConformance(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		es := envs(t, n)
		err := commtest.RunLocalRanks(n, func(r int) error {
			return commtest.DeviceConformance(context.Background(), es[r], commtest.Lens())
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestDeviceFaults(t *testing.T) {
	for _, n := range []int{2, 3} {
		es := envs(t, n)
		if err := commtest.RunLocalRanks(n, func(r int) error { return commtest.DeviceFaults(context.Background(), es[r]) }); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
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
}

type fakeBuf struct{}

func (fakeBuf) Len() int             { return 1 }
func (fakeBuf) DType() backend.DType { return backend.Float32 }
