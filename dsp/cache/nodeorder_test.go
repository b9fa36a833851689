package cache

import (
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

type rowsFunc func(ids []int32, out []float32) error

func (f rowsFunc) Gather(ids []int32, out []float32) error { return f(ids, out) }

// TestHostStoreNodeOrderTable: a HostStore on the CPU back end whose
// notional cache holds every row hands out its table as a buffer over
// the same memory (no copy: a write to the table shows through); a
// partial cache, a row source, bf16 precision or a table of the wrong
// size do not.
func TestHostStoreNodeOrderTable(t *testing.T) {
	fp32, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bf16, err := cpu.New(cpu.Options{Precision: backend.BF16})
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 5, 3
	table := make([]float32, rows*cols)
	for i := range table {
		table[i] = float32(i) / 7
	}
	s := &HostStore{B: fp32, Table: table, Rows: rows, Cols: cols, Hot: rows}
	buf, ok := s.NodeOrderTable()
	if !ok || buf.DType() != backend.Float32 || buf.Len() != rows*cols {
		t.Fatalf("every row cached: ok %v, %v", ok, buf)
	}
	table[7] = 42
	got := make([]float32, rows*cols)
	if err := fp32.Download(got, buf); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != table[i] {
			t.Fatalf("value %d is %v, the table's %v: not the table's memory", i, got[i], table[i])
		}
	}
	for name, st := range map[string]*HostStore{
		"partial": {B: fp32, Table: table, Rows: rows, Cols: cols, Hot: rows - 1},
		"source":  {B: fp32, Table: table, Rows: rows, Cols: cols, Hot: rows, Source: rowsFunc(func([]int32, []float32) error { return nil })},
		"bf16":    {B: bf16, Table: table, Rows: rows, Cols: cols, Hot: rows},
		"short":   {B: fp32, Table: table[:rows*cols-1], Rows: rows, Cols: cols, Hot: rows},
		"empty":   {B: fp32, Rows: 0, Cols: cols},
	} {
		if b, ok := st.NodeOrderTable(); ok || b != nil {
			t.Errorf("%s: NodeOrderTable %v, %v; want none", name, b, ok)
		}
	}
}
