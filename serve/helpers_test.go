package serve

import (
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
)

var (
	tinyOnce sync.Once
	tinyDS   *dataset.Dataset
	tinyErr  error
)

// tiny is the generated "tiny" dataset (2,000 nodes, 16 features, 5
// classes), made once per test binary.
func tiny(t testing.TB) *dataset.Dataset {
	t.Helper()
	tinyOnce.Do(func() {
		cfg, err := gen.Preset("tiny")
		if err != nil {
			tinyErr = err
			return
		}
		tinyDS, tinyErr = gen.Generate(cfg, nil)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDS
}

// csrOf builds an in-adjacency from "v <- u" pairs: in[v] lists u.
func csrOf(t testing.TB, n int, pairs [][2]int32) *graph.CSR {
	t.Helper()
	rows := make([][]int32, n)
	for _, p := range pairs {
		rows[p[0]] = append(rows[p[0]], p[1])
	}
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1)}
	for v, r := range rows {
		g.Indices = append(g.Indices, r...)
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}
