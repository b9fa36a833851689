package fullgraph

import (
	"context"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

var (
	coraOnce sync.Once
	coraDS   *dataset.Dataset
	coraErr  error
)

func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	coraOnce.Do(func() { coraDS, coraErr = builtin.Load("cora") })
	if coraErr != nil {
		t.Fatal(coraErr)
	}
	return coraDS
}

func citeseer(t testing.TB) *dataset.Dataset {
	t.Helper()
	ds, err := importer.LoadShared(filepath.Join(testkit.DatasetsDir(t), "citeseer"), importer.Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func cpuBackend(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// devices returns p CPU virtual devices sharing one back end.
func devices(t testing.TB, p int) []backend.Backend {
	b := cpuBackend(t)
	bs := make([]backend.Backend, p)
	for i := range bs {
		bs[i] = b
	}
	return bs
}

func run(t testing.TB, ds *dataset.Dataset, cfg Config, p int) *Report {
	t.Helper()
	rep, err := Run(context.Background(), ds, cfg, Options{Backends: devices(t, p)})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func relDiff(a, b float64) float64 {
	return math.Abs(a-b) / math.Max(math.Abs(b), 1e-12)
}
