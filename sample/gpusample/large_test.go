package gpusample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/sysmem"
	"github.com/strata-gnn/strata/sample"
)

// beyondGraph returns an in-adjacency of n nodes of degree deg each,
// neighbors and (when weighted) weights in {0, 1, 2, 3} hashed from the
// edge position, filled in parallel.
func beyondGraph(n, deg int64, weighted bool) *graph.CSR {
	ne := n * deg
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1), Indices: make([]int32, ne)}
	for v := int64(0); v <= n; v++ {
		g.Indptr[v] = v * deg
	}
	if weighted {
		g.Weights = make([]float32, ne)
	}
	parts := int64(runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() {
			for e := ne * p / parts; e < ne*(p+1)/parts; e++ {
				h := uint64(e) * 0x9E3779B97F4A7C15
				g.Indices[e] = int32((h >> 32) % uint64(n))
				if weighted {
					g.Weights[e] = float32(h >> 62)
				}
			}
		})
	}
	wg.Wait()
	return g
}

// checkDraws requires every edge of mb to be an in-edge of its
// destination whose local index names its source (and, weighted, of
// positive weight); it returns how many edge ids are past 2^31.
func checkDraws(t *testing.T, name string, g *graph.CSR, mb *sample.MiniBatch, weighted bool) int {
	t.Helper()
	past := 0
	for bi, blk := range mb.Blocks {
		for i := 0; i < blk.NumDst; i++ {
			v := blk.SrcNodes[i]
			for p := blk.Indptr[i]; p < blk.Indptr[i+1]; p++ {
				e := blk.EdgeIDs[p]
				if e < g.Indptr[v] || e >= g.Indptr[v+1] {
					t.Fatalf("%s: block %d node %d: edge %d outside its row [%d, %d)", name, bi, v, e, g.Indptr[v], g.Indptr[v+1])
				}
				if blk.SrcNodes[blk.Indices[p]] != g.Indices[e] {
					t.Fatalf("%s: block %d node %d: edge %d's source is %d, the block says %d", name, bi, v, e, g.Indices[e], blk.SrcNodes[blk.Indices[p]])
				}
				if weighted && g.Weights[e] <= 0 {
					t.Fatalf("%s: block %d node %d: edge %d has weight %v", name, bi, v, e, g.Weights[e])
				}
				if e > math.MaxInt32 {
					past++
				}
			}
		}
	}
	return past
}

// TestBeyond2GEdges samples a graph of more than 2^31 edges (2.2G: 8.8 GB
// of neighbor IDs, as much again of weights) whose last rows start past
// position 2^31, one row straddling it: uniform batches equal the CPU
// sampler's with the graph on the device, mapped and split (the device
// copy itself past 2^31 entries); weighted draws are positive-weight
// in-edges of their destinations.
func TestBeyond2GEdges(t *testing.T) {
	if testing.Short() {
		t.Skip("more than 2^31 edges (tens of GB of host and device memory): skipped in -short mode")
	}
	d := gpu(t)
	const n, deg = 1 << 16, 33_600 // 2,202,009,600 edges
	const hostNeed, devNeed = 48 << 30, 40 << 30
	if b, ok := sysmem.Available(); ok && b.Bytes < hostNeed {
		t.Skipf("needs %s of host memory, %s", sysmem.Format(hostNeed), b)
	}
	if free, _, err := d.MemInfo(); err != nil || free < devNeed {
		t.Skipf("needs %s of free device memory: %d bytes free (%v)", sysmem.Format(devNeed), free, err)
	}
	g := beyondGraph(n, deg, false)
	// Row first straddles position 2^31; the rows after it start past it.
	first := int64(math.MaxInt32) / deg
	if g.Indptr[first] > math.MaxInt32 || g.Indptr[first+1] <= math.MaxInt32 {
		t.Fatalf("row %d spans [%d, %d), not 2^31", first, g.Indptr[first], g.Indptr[first+1])
	}
	var tail []graph.NodeID
	for v := first; v < n; v++ {
		tail = append(tail, graph.NodeID(v))
	}
	r := rand.New(rand.NewPCG(11, 12))
	batches := [][]graph.NodeID{tail, seedsOf(r, n, 512)}
	// Split: every row but each 64th, in ID order, so that the device
	// copy holds more than 2^31 entries and the last rows sit past 2^31
	// in it; the others are read from host memory.
	var rows []graph.NodeID
	for v := range graph.NodeID(n) {
		if v%64 != 63 {
			rows = append(rows, v)
		}
	}
	for _, fan := range [][]int{{10, 5}, {-1}} {
		for _, replace := range []bool{false, true} {
			cpuS, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: fan, Replace: replace})
			if err != nil {
				t.Fatal(err)
			}
			for _, place := range []Placement{OnDevice, Mapped, Split} {
				if fan[0] < 0 && (replace || place != OnDevice) {
					continue // all neighbors: one case is enough
				}
				name := fmt.Sprintf("fanouts=%v replace=%v placement=%d", fan, replace, place)
				cfg := Config{Fanouts: fan, Replace: replace, Placement: place}
				if place == Split {
					cfg.DeviceRows = rows
				}
				gs, err := New(d, g, cfg)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				past := 0
				for b, seeds := range batches {
					if fan[0] < 0 {
						seeds = []graph.NodeID{tail[0], tail[1], tail[len(tail)-1], 5} // 33,600 edges each
					}
					key := sample.Key{Seed: 7, Epoch: 2, Batch: b}
					want, err := cpuS.Sample(seeds, key)
					if err != nil {
						t.Fatal(err)
					}
					got, err := gs.Sample(seeds, key)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					past += checkDraws(t, name, g, got, false)
					compareBatches(t, name, got, want)
				}
				if past == 0 {
					t.Fatalf("%s: no edge drawn past position 2^31", name)
				}
				t.Logf("%s: %d edges drawn past position 2^31", name, past)
				if err := gs.Close(); err != nil {
					t.Fatal(err)
				}
				debug.FreeOSMemory() // the split's host copy, before the next placement's
			}
		}
	}
	// Weighted, on the device: the weights past 2^31, and with
	// replacement the running sums (17.6 GB) too.
	g = nil
	debug.FreeOSMemory()
	g = beyondGraph(n, deg, true)
	for _, replace := range []bool{false, true} {
		name := fmt.Sprintf("weighted replace=%v", replace)
		gs, err := New(d, g, Config{Fanouts: []int{10, 5}, Replace: replace, Weighted: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		past := 0
		for b, seeds := range batches {
			mb, err := gs.Sample(seeds, sample.Key{Seed: 7, Batch: b})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			past += checkDraws(t, name, g, mb, true)
			// Every seed has positive-weight edges: fanout 10 is met
			// with replacement and by rows of 10 or more without.
			top := mb.Blocks[len(mb.Blocks)-1]
			for i := 0; i < top.NumDst; i++ {
				if k := top.Indptr[i+1] - top.Indptr[i]; k != 10 {
					t.Fatalf("%s: seed %d drew %d edges, want 10", name, top.SrcNodes[i], k)
				}
			}
		}
		if past == 0 {
			t.Fatalf("%s: no edge drawn past position 2^31", name)
		}
		t.Logf("%s: %d edges drawn past position 2^31", name, past)
		if err := gs.Close(); err != nil {
			t.Fatal(err)
		}
		debug.FreeOSMemory()
	}
}
