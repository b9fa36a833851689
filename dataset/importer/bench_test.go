package importer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer/tabletest"
	"github.com/strata-gnn/strata/graph"
)

// ogbFixture writes an OGB-layout dataset of n nodes, n*deg edges and
// dim-wide features (gzip-compressed, like OGB's downloads).
func ogbFixture(b *testing.B, n, deg, dim int) (string, int64) {
	dir := b.TempDir()
	var edges, feats, labels bytes.Buffer
	x := uint64(1)
	for u := 0; u < n; u++ {
		for k := 0; k < deg; k++ {
			x = x*6364136223846793005 + 1442695040888963407
			fmt.Fprintf(&edges, "%d,%d\n", u, (x>>33)%uint64(n))
		}
		for j := 0; j < dim; j++ {
			if j > 0 {
				feats.WriteByte(',')
			}
			x = x*6364136223846793005 + 1442695040888963407
			fmt.Fprintf(&feats, "%.6f", float64(x>>40)/float64(1<<24)-0.5)
		}
		feats.WriteByte('\n')
		fmt.Fprintf(&labels, "%d\n", u%47)
	}
	size := int64(edges.Len() + feats.Len() + labels.Len())
	writeFile(b, dir, "raw/edge.csv.gz", edges.Bytes())
	writeFile(b, dir, "raw/node-feat.csv.gz", feats.Bytes())
	writeFile(b, dir, "raw/node-label.csv.gz", labels.Bytes())
	writeFile(b, dir, "raw/num-node-list.csv.gz", []byte(fmt.Sprintf("%d\n", n)))
	return dir, size
}

// go test -run XXX -bench OGB -benchtime 1x ./dataset/importer
func BenchmarkOGB(b *testing.B) {
	dir, size := ogbFixture(b, 200_000, 25, 100)
	b.SetBytes(size) // decompressed text bytes
	for b.Loop() {
		if _, err := LoadOGB(dir, Options{Quiet: true, Symmetrize: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSNAP(b *testing.B) {
	var text bytes.Buffer
	x := uint64(1)
	const n, e = 1_000_000, 10_000_000
	for i := 0; i < e; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		fmt.Fprintf(&text, "%d\t%d\n", (x>>13)%n, (x>>40)%n)
	}
	p := writeFile(b, b.TempDir(), "g.txt", text.Bytes())
	for _, remap := range []bool{false, true} {
		b.Run(fmt.Sprintf("remap=%v", remap), func(b *testing.B) {
			b.SetBytes(int64(text.Len()))
			for b.Loop() {
				if _, err := LoadSNAP(p, Options{Quiet: true, RemapIDs: remap}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNPY(b *testing.B) {
	const n, e, dim = 500_000, 10_000_000, 100
	dir := b.TempDir()
	ei := make([]int64, 2*e)
	x := uint64(1)
	for i := range ei {
		x = x*6364136223846793005 + 1442695040888963407
		ei[i] = int64((x >> 33) % n)
	}
	writeFile(b, dir, "edge_index.npy", npyBytes("<i8", []int64{2, e}, le(ei)))
	writeFile(b, dir, "features.npy", npyBytes("<f4", []int64{n, dim}, make([]byte, 4*n*dim)))
	b.SetBytes(16*e + 4*n*dim)
	for b.Loop() {
		if _, err := LoadNPY(dir, Options{Quiet: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// tableFixture writes an edge table of m edges on n nodes (src, dst,
// weight) as CSV and as snappy Parquet.
func tableFixture(b *testing.B, n, m int) (csvPath, pqPath string) {
	dir := b.TempDir()
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1)}
	x := uint64(1)
	per := m / n
	for u := range n {
		for range per {
			x = x*6364136223846793005 + 1442695040888963407
			g.Indices = append(g.Indices, int32((x>>33)%uint64(n)))
			g.Weights = append(g.Weights, float32(x>>54)/8)
		}
		g.Indptr[u+1] = int64(len(g.Indices))
	}
	d := &dataset.Dataset{Graph: g, Directed: true}
	c, _, err := tabletest.WriteCSV(dir, d, tabletest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, _, err := tabletest.WriteParquet(dir, d, tabletest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return c, p
}

// go test -run XXX -bench Tables -benchtime 3x ./dataset/importer
func BenchmarkTables(b *testing.B) {
	c, p := tableFixture(b, 100_000, 1_000_000)
	for _, tc := range []struct{ name, path string }{{"csv", c}, {"parquet", p}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: tc.path}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(1_000_000*b.N)/b.Elapsed().Seconds()/1e6, "Medges/s")
		})
	}
}
