package cache

import (
	"errors"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestPlanValueBytes: bfloat16 stores (2 bytes a value) fit twice the
// rows of a budget; other value sizes are refused; a HostStore counts its
// rows at its back end's precision.
func TestPlanValueBytes(t *testing.T) {
	if ValueBytes(backend.BF16) != 2 || ValueBytes(backend.TF32) != 4 || ValueBytes(backend.FP32) != 4 {
		t.Fatalf("ValueBytes: %d %d %d", ValueBytes(backend.BF16), ValueBytes(backend.TF32), ValueBytes(backend.FP32))
	}
	const n, cols, k = 100, 2, 3
	b := evenBook(t, n, k)
	hot := make([]graph.NodeID, n)
	for i := range hot {
		hot[i] = graph.NodeID(i)
	}
	for _, c := range []struct {
		vb, want int64 // PlanConfig.ValueBytes, Plan.ValueBytes
		rows     int
	}{{0, 4, 5}, {4, 4, 5}, {2, 2, 10}} {
		plan, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 5 * cols * 4, ValueBytes: c.vb})
		if err != nil {
			t.Fatal(err)
		}
		if plan.ValueBytes() != c.want {
			t.Fatalf("ValueBytes %d: plan says %d", c.vb, plan.ValueBytes())
		}
		for r := range k {
			if got := len(plan.Rows(r)); got != c.rows {
				t.Fatalf("ValueBytes %d: rank %d caches %d rows, want %d", c.vb, r, got, c.rows)
			}
		}
	}
	for _, vb := range []int64{1, 3, 8, -2} {
		if _, err := NewPlan(b, hot, cols, PlanConfig{BudgetBytes: 40, ValueBytes: vb}); !errors.Is(err, ErrInput) {
			t.Fatalf("ValueBytes %d: %v", vb, err)
		}
	}
	for _, p := range backend.Precisions {
		be, err := cpu.New(cpu.Options{Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		s := &HostStore{B: be, Rows: n, Cols: cols, Hot: 7}
		if got := s.DeviceBytes(); got != 7*cols*ValueBytes(p) {
			t.Fatalf("%s: HostStore of 7 hot rows counts %d bytes", p, got)
		}
	}
}
