package infer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// randomGraph is an in-adjacency of n nodes with power-law-ish degrees
// (some hubs read by many rows, repeated sources, self loops).
func randomGraph(n int, seed uint64) *graph.CSR {
	rng := rand.New(rand.NewPCG(seed, 3))
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1)}
	for v := range n {
		deg := rng.IntN(12)
		if rng.IntN(50) == 0 {
			deg += rng.IntN(400)
		}
		for range deg {
			u := rng.IntN(n)
			if rng.IntN(3) == 0 {
				u = rng.IntN(1 + n/100) // hubs
			}
			g.Indices = append(g.Indices, int32(u))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	return g
}

// refBuild is the block by definition: the destinations, then every
// other source in the order of its first edge.
func refBuild(in *graph.CSR, dst []int32) *hostChunk {
	local := map[int32]int32{}
	hc := &hostChunk{indptr: []int64{0}}
	for i, v := range dst {
		local[v] = int32(i)
		hc.src = append(hc.src, v)
	}
	for _, v := range dst {
		for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
			id, ok := local[u]
			if !ok {
				id = int32(len(hc.src))
				local[u] = id
				hc.src = append(hc.src, u)
			}
			hc.indices = append(hc.indices, id)
		}
		hc.indptr = append(hc.indptr, int64(len(hc.indices)))
	}
	return hc
}

// TestBuildChunkWorkers: a chunk's block and sources are the same bytes
// whatever the number of goroutines that build them (1, 2, 3, 8, more
// than the edges allow), equal to the definition, for contiguous and
// scattered destinations, chunk after chunk on one scratch (stamps
// reused, and wrapped), with GCN's degrees.
func TestBuildChunkWorkers(t *testing.T) {
	defer func(m, p int) { minPartEdges, minParallel = m, p }(minPartEdges, minParallel)
	minPartEdges, minParallel = 16, 2 // split even small chunks, on 2 goroutines too
	const n = 5000
	in := randomGraph(n, 1)
	deg := selfLoopOutDegrees(in)
	rng := rand.New(rand.NewPCG(9, 9))
	var chunks [][]int32
	for _, ab := range [][2]int{{0, 1}, {0, 700}, {700, 2500}, {4990, 5000}, {100, 100}} {
		var dst []int32
		for v := ab[0]; v < ab[1]; v++ {
			dst = append(dst, int32(v))
		}
		chunks = append(chunks, dst)
	}
	scattered := rng.Perm(n)[:900]
	chunks = append(chunks, func() []int32 {
		d := make([]int32, len(scattered))
		for i, v := range scattered {
			d[i] = int32(v)
		}
		return d
	}())
	for _, workers := range []int{1, 2, 3, 8, 1000} {
		s := newScratch(n)
		for round := range 2 {
			if round == 1 {
				s.cur = 1<<32 - 2 // the stamps wrap during this round
			}
			for i, dst := range chunks {
				t.Run(fmt.Sprintf("workers=%d/round=%d/chunk=%d", workers, round, i), func(t *testing.T) {
					got, err := buildChunk(in, s, dst, deg, workers)
					if err != nil {
						t.Fatal(err)
					}
					want := refBuild(in, dst)
					if !slices.Equal(got.src, want.src) || !slices.Equal(got.indptr, want.indptr) || !slices.Equal(got.indices, want.indices) {
						t.Fatalf("block differs from the definition: %d sources (want %d), %d edges (want %d)", len(got.src), len(want.src), len(got.indices), len(want.indices))
					}
					for j, u := range got.src {
						if got.deg[j] != deg[u] {
							t.Fatalf("source %d (node %d): degree %d, want %d", j, u, got.deg[j], deg[u])
						}
					}
				})
			}
		}
	}
}

// BenchmarkBuildChunk times building 200k-node chunks' blocks of a
// 4M-node graph (38M edges; the word per node does not fit the caches,
// as at papers100M's size) on 1, 2, 4, 8 and 16 goroutines:
// go test -run - -bench BuildChunk -benchtime 20x ./infer/
func BenchmarkBuildChunk(b *testing.B) {
	defer func(p int) { minParallel = p }(minParallel)
	minParallel = 2
	const n, chunk = 4_000_000, 200_000
	in := randomGraph(n, 2)
	for _, workers := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			benchBuild(b, in, newScratch(n), n, chunk, workers)
		})
	}
}

// TestPlanMatchesDefinition: the nodes each layer computes, found by
// several goroutines over a bitset, are the sorted union of the next
// layer's nodes and their in-neighbors, hop by hop, whatever the number
// of goroutines.
func TestPlanMatchesDefinition(t *testing.T) {
	const n = 400_000 // enough nodes a hop for 8 goroutines
	in := randomGraph(n, 3)
	req := make([]int32, 0, 3000)
	for v := int32(7); v < n; v += 29 {
		req = append(req, v, v) // duplicates are listed once
	}
	want := [][]int32{nil, nil, nil}
	cur := slices.Clone(req)
	slices.Sort(cur)
	want[2] = slices.Compact(cur)
	for l := 1; l >= 0; l-- {
		set := map[int32]bool{}
		for _, v := range want[l+1] {
			set[v] = true
			for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
				set[u] = true
			}
		}
		for v := range set {
			want[l] = append(want[l], v)
		}
		slices.Sort(want[l])
	}
	if len(want[0]) == n || len(want[1]) == n || len(want[1]) <= len(want[2]) {
		t.Fatalf("layers of %d, %d, %d nodes: not a test of the hops", len(want[0]), len(want[1]), len(want[2]))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 3, 8} {
		runtime.GOMAXPROCS(procs)
		r := &run{in: in, n: n, last: 2}
		r.plan(req)
		for l := range want {
			if !slices.Equal(r.need[l], want[l]) {
				t.Fatalf("GOMAXPROCS %d, layer %d: %d nodes, want %d", procs, l+1, len(r.need[l]), len(want[l]))
			}
		}
	}
}

// BenchmarkBuildChunkPapers builds chunks of the papers100M shape's
// size (52,000 destinations of about 29 in-edges each, 1.5M edges) whose
// sources range over 111M nodes, so each lookup in the builder's scratch
// (a word a node, 888 MB) is a random access to main memory, as on the
// papers shape; only the chunks' destinations have edges.
func BenchmarkBuildChunkPapers(b *testing.B) {
	defer func(p int) { minParallel = p }(minParallel)
	minParallel = 2
	const n, dsts, chunk = 111_000_000, 1_040_000, 52_000
	rng := rand.New(rand.NewPCG(5, 6))
	in := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1)}
	for v := range n {
		if v < dsts {
			for range 1 + rng.IntN(57) {
				u := rng.IntN(n)
				if rng.IntN(3) == 0 {
					u = rng.IntN(n / 100) // hubs
				}
				in.Indices = append(in.Indices, int32(u))
			}
		}
		in.Indptr[v+1] = int64(len(in.Indices))
	}
	for _, workers := range []int{1, 2} {
		for _, mm := range []int{minMapped, 1 << 62} {
			b.Run(fmt.Sprintf("workers=%d/mapped=%v", workers, mm < 1<<62), func(b *testing.B) {
				saved := minMapped
				minMapped = mm
				s := newScratch(n)
				minMapped = saved
				benchBuild(b, in, s, dsts, chunk, workers)
			})
		}
	}
}

// benchBuild builds chunks of consecutive destinations below span, one
// after the other on s, for b's iterations, reports the edges built a
// second and frees s.
func benchBuild(b *testing.B, in *graph.CSR, s *scratch, span, chunk, workers int) {
	if s.unmap != nil {
		defer s.unmap()
	}
	edges := int64(0)
	for i := range b.N {
		lo := (i * chunk) % (span - chunk)
		dst := make([]int32, chunk)
		for j := range dst {
			dst[j] = int32(lo + j)
		}
		hc, err := buildChunk(in, s, dst, nil, workers)
		if err != nil {
			b.Fatal(err)
		}
		edges += int64(len(hc.indices))
	}
	b.ReportMetric(float64(edges)/b.Elapsed().Seconds()/1e6, "Medges/s")
}
