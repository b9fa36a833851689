package dataset

import (
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// synth builds a directed dataset of n nodes with deg out-edges each and
// dim-wide features, deterministic and cheap to generate.
func synth(n, deg, dim int) *Dataset {
	e := n * deg
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1), Indices: make([]int32, e)}
	x := uint64(1)
	for u := 0; u < n; u++ {
		g.Indptr[u+1] = int64((u + 1) * deg)
		for k := 0; k < deg; k++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			g.Indices[u*deg+k] = int32(x % uint64(n))
		}
	}
	f := make([]float32, n*dim)
	for i := range f {
		f[i] = float32(i%7) * 0.5
	}
	l := make([]int32, n)
	for i := range l {
		l[i] = int32(i % 47)
	}
	return &Dataset{Name: "synth", Graph: g, Directed: true, FeatDim: dim, Features: f,
		NumClasses: 47, Labels: l, Train: []int32{0, 1, 2}, Val: []int32{3}, Test: []int32{4}}
}

func (d *Dataset) bytes() int64 {
	return int64(len(d.Graph.Indptr))*8 + int64(len(d.Graph.Indices))*4 + int64(len(d.Features))*4 + int64(len(d.Labels))*4
}

// Products shape (2.45M nodes, 125M edges, 100-d features, 1.5 GB):
//
//	go test -run XXX -bench 'WriteOpen/products' -benchtime 1x ./dataset
func BenchmarkWriteOpen(b *testing.B) {
	for _, s := range []struct {
		name        string
		n, deg, dim int
	}{{"small", 100_000, 10, 100}, {"products", 2_449_029, 51, 100}} {
		b.Run(s.name, func(b *testing.B) {
			d := synth(s.n, s.deg, s.dim)
			dir := filepath.Join(b.TempDir(), "ds")
			if err := Write(dir, d, WriteOptions{Quiet: true}); err != nil {
				b.Fatal(err)
			}
			b.Run("Write", func(b *testing.B) {
				b.SetBytes(d.bytes())
				for b.Loop() {
					if err := Write(dir, d, WriteOptions{Overwrite: true, Quiet: true}); err != nil {
						b.Fatal(err)
					}
				}
			})
			for _, o := range []struct {
				name string
				opts OpenOptions
			}{{"Open", OpenOptions{Quiet: true}}, {"OpenNoChecksum", OpenOptions{SkipChecksums: true, Quiet: true}}, {"OpenNoMmap", OpenOptions{NoMmap: true, Quiet: true}}} {
				b.Run(o.name, func(b *testing.B) {
					b.SetBytes(d.bytes())
					for b.Loop() {
						got, err := Open(dir, o.opts)
						if err != nil {
							b.Fatal(err)
						}
						got.Close()
					}
				})
			}
		})
	}
}
