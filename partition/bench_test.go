package partition

import (
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/partition/metis"
)

// Benchmarks of our partitioner against METIS (when libmetis is
// installed) on the same symmetrized graph, reporting the edge cut and
// balance besides the time. Both get the graph already symmetrized, so
// they time the same work.
//
//	go test -run XXX -bench 'CNR2000' -benchtime 5x ./partition
//	STRATA_PRODUCTS_DIR=dir go test -run XXX -bench Products -benchtime 1x -timeout 60m ./partition
//
// BenchmarkProducts reads a Strata dataset of the ogbn-products shape from
// $STRATA_PRODUCTS_DIR (e.g. written by 'strata gen products'), or
// generates the dataset/gen "products" preset (2.45M nodes, ~124M directed
// edges; about a minute and 2 GB).

var (
	cnrOnce sync.Once
	cnrSym  *graph.CSR
	cnrErr  error

	productsOnce sync.Once
	productsSym  *graph.CSR
	productsErr  error
)

func cnrGraph(b *testing.B) *graph.CSR {
	dir := testkit.Dataset(b, "cnr-2000")
	cnrOnce.Do(func() {
		var ds *dataset.Dataset
		if ds, cnrErr = importer.LoadShared(dir, importer.Options{Quiet: true}); cnrErr == nil {
			cnrSym, cnrErr = Symmetrize(ds.Graph)
		}
	})
	if cnrErr != nil {
		b.Fatal(cnrErr)
	}
	return cnrSym
}

func productsGraph(b *testing.B) *graph.CSR {
	productsOnce.Do(func() {
		var ds *dataset.Dataset
		if dir := os.Getenv("STRATA_PRODUCTS_DIR"); dir != "" {
			ds, productsErr = dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
		} else {
			var cfg gen.Config
			if cfg, productsErr = gen.Preset("products"); productsErr != nil {
				return
			}
			cfg.FeatDim = 0 // only the graph matters here
			ds, productsErr = gen.Generate(cfg, nil)
		}
		if productsErr == nil {
			productsSym, productsErr = Symmetrize(ds.Graph)
		}
	})
	if productsErr != nil {
		b.Fatal(productsErr)
	}
	return productsSym
}

func benchPartition(b *testing.B, s *graph.CSR, m Method, k int) {
	if m == METIS {
		if err := metis.Load(); err != nil {
			b.Skipf("libmetis not available: %v", err)
		}
	}
	var r *Result
	var err error
	for i := 0; b.Loop(); i++ {
		if r, err = PartitionSymmetric(bg, s, Options{K: k, Method: m, Seed: uint64(i + 1)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.EdgeCut), "cut")
	b.ReportMetric(r.Balance[0], "balance")
}

func BenchmarkCNR2000(b *testing.B) {
	if testing.Short() {
		b.Skip("cnr-2000 benchmarks are not short")
	}
	s := cnrGraph(b)
	for _, m := range []Method{Multilevel, METIS} {
		for _, k := range []int{2, 4, 8} {
			b.Run(string(m)+"/k="+strconv.Itoa(k), func(b *testing.B) { benchPartition(b, s, m, k) })
		}
	}
}

func BenchmarkProducts(b *testing.B) {
	if testing.Short() {
		b.Skip("products-shape benchmarks are not short")
	}
	s := productsGraph(b)
	for _, m := range []Method{Multilevel, METIS} {
		for _, k := range []int{4, 8} {
			b.Run(string(m)+"/k="+strconv.Itoa(k), func(b *testing.B) { benchPartition(b, s, m, k) })
		}
	}
}

