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
//
// Measured 2026-11-21 on 2 pinned cores of an idle 16-core Xeon
// (taskset -c 2,3, GOMAXPROCS=2), libmetis 5.1.0 (Debian), default
// imbalance 1.03; cnr-2000 cuts are means over seeds 1..10, products is
// the generated preset (seed 1); both methods partition the same
// symmetrized graph in the same process:
//
//	graph     k  ours: cut      time   METIS: cut     time
//	cnr-2000  2        548.1   0.292s          771.1  0.276s
//	cnr-2000  4       3303     0.280s         3220    0.284s
//	cnr-2000  8       5733     0.290s         5906    0.310s
//	products  4   11,311,075  46.9s     12,391,874   65.3s
//	products  8   15,857,022  55.8s     15,908,018   84.2s

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
	// Seeds 1..N: the reported cut is the mean over them (the cut of one
	// seed varies by tens of percent on cnr-2000), the balance the worst.
	var sum, worst float64
	n := 0
	for b.Loop() {
		n++
		r, err := PartitionSymmetric(bg, s, Options{K: k, Method: m, Seed: uint64(n)})
		if err != nil {
			b.Fatal(err)
		}
		sum += float64(r.EdgeCut)
		worst = max(worst, r.Balance[0])
	}
	b.ReportMetric(sum/float64(n), "cut")
	b.ReportMetric(worst, "balance")
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
