package gpusample

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestNewNeedsDeviceCapabilities: a back end that cannot run the
// sampler's kernels (the CPU's) is refused by New and Sibling with a
// config error on dev that names what it lacks, before anything is
// placed; a nil device likewise.
func TestNewNeedsDeviceCapabilities(t *testing.T) {
	c, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 2}, Indices: []int32{1, 0}}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"New(cpu)", func() error { _, err := New(c, g, Config{Fanouts: []int{1}}); return err }, "backend.Kernels"},
		{"New(nil)", func() error { _, err := New(nil, g, Config{Fanouts: []int{1}}); return err }, "nil device"},
		{"NewHetero(cpu)", func() error {
			_, err := NewHetero(c, []int64{2}, []sample.Relation{{In: g}}, sample.HeteroConfig{Fanouts: [][]int{{1}}}, OnDevice)
			return err
		}, "backend.Kernels"},
		{"Sibling(cpu)", func() error { _, err := (&Sampler{}).Sibling(c); return err }, "backend.Kernels"},
	} {
		err := tc.call()
		var se *sample.Error
		if !errors.As(err, &se) || se.Field != "dev" || !errors.Is(err, sample.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a config error on dev mentioning %q", tc.name, err, tc.want)
		}
	}
}
