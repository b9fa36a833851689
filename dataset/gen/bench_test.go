package gen

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
)

// benchGenerateWrite generates preset name and writes it (fsynced) to a
// temporary directory, reporting both times and the stored edge count.
func benchGenerateWrite(b *testing.B, name string) {
	c := mustPreset(b, name)
	var genS, writeS float64
	var edges int64
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		d, err := Generate(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		dir := filepath.Join(b.TempDir(), name)
		if err := dataset.Write(dir, d, dataset.WriteOptions{Quiet: true}); err != nil {
			b.Fatal(err)
		}
		genS += t1.Sub(t0).Seconds()
		writeS += time.Since(t1).Seconds()
		edges = d.Graph.NumEdges()
	}
	b.ReportMetric(genS/float64(b.N), "gen-s/op")
	b.ReportMetric(writeS/float64(b.N), "write-s/op")
	b.ReportMetric(float64(edges), "edges")
}

func BenchmarkGenerateTiny(b *testing.B)  { benchGenerateWrite(b, "tiny") }
func BenchmarkGenerateSmall(b *testing.B) { benchGenerateWrite(b, "small") }

// BenchmarkGeneratePapersS is the CI-sized papers shape (1.1M nodes, 32M
// stored edges, ~0.8 GB).
func BenchmarkGeneratePapersS(b *testing.B) {
	if testing.Short() {
		b.Skip("papers-s preset: ~0.8 GB of memory; skipped with -short")
	}
	benchGenerateWrite(b, "papers-s")
}

// BenchmarkGenerateProducts is the 2-minute target: the full
// ogbn-products shape (~124M stored edges, ~1.5 GB) generated and written.
// Run it alone: go test -run ^$ -bench GenerateProducts -benchtime 1x.
func BenchmarkGenerateProducts(b *testing.B) {
	if testing.Short() {
		b.Skip("products preset: ~2 GB of memory; skipped with -short")
	}
	benchGenerateWrite(b, "products")
}
