package dataset

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/graph"
)

// symmetricGraph returns a random undirected graph of n nodes with about
// deg stored edges a node (both directions of every edge), rows unsorted.
func symmetricGraph(n, deg int, seed uint64) *graph.CSR {
	r := rand.New(rand.NewPCG(seed, 1))
	adj := make([][]int32, n)
	for u := range n {
		for range deg / 2 {
			v := r.IntN(n)
			adj[u] = append(adj[u], int32(v))
			adj[v] = append(adj[v], int32(u))
		}
	}
	g := &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: make([]int64, n+1)}
	for u, row := range adj {
		g.Indices = append(g.Indices, row...)
		g.Indptr[u+1] = int64(len(g.Indices))
	}
	return g
}

// withProcs runs f with GOMAXPROCS set to p.
func withProcs(p int, f func()) {
	old := runtime.GOMAXPROCS(p)
	defer runtime.GOMAXPROCS(old)
	f()
}

// The in-degree check counts by blocks of nodes in rounds of edges on
// several goroutines; its answer names the same node for any number of
// CPUs and rounds, and the counts are a plain count's.
func TestDegreeSymmetryBlocked(t *testing.T) {
	// 1.1M edges (past parallelMin); 3 blocks of nodes once the direct
	// count's limit is lowered.
	g := symmetricGraph(140_000, 8, 1)
	oldDirect := degreeDirectMax
	degreeDirectMax = 100_000
	defer func() { degreeDirectMax = oldDirect }()
	if err := checkDegreeSymmetry("indices", g); err != nil {
		t.Fatalf("symmetric graph: %v", err)
	}
	want := make([]int64, g.NumRows)
	for _, v := range g.Indices {
		want[v]++
	}
	oldRound := degreeRound
	defer func() { degreeRound = oldRound }()
	for _, round := range []int{oldRound, 300_007} {
		degreeRound = round
		for _, procs := range []int{1, 3} {
			got32, got64 := inDegrees[int32](g.Indices, g.NumRows, procs), inDegrees[int64](g.Indices, g.NumRows, procs)
			for v := range want {
				if int64(got32[v]) != want[v] || got64[v] != want[v] {
					t.Fatalf("round %d, %d CPUs: node %d counted %d (int32) and %d (int64) times, want %d", round, procs, v, got32[v], got64[v], want[v])
				}
			}
		}
	}
	degreeRound = 300_007
	// Move edge ends: node 130,001 loses an in-edge that node 7 gains,
	// and node 139,000 one that 130,000 gains; the first bad node is 7.
	bad := &graph.CSR{NumRows: g.NumRows, NumCols: g.NumCols, Indptr: g.Indptr, Indices: append([]int32(nil), g.Indices...)}
	moved := 0
	for i, v := range bad.Indices {
		if v == 130_001 && moved == 0 || v == 139_000 && moved == 1 {
			bad.Indices[i] = map[int32]int32{130_001: 7, 139_000: 130_000}[v]
			moved++
		}
	}
	if moved != 2 {
		t.Fatalf("moved %d edge ends, want 2", moved)
	}
	out := bad.Indptr[8] - bad.Indptr[7]
	wantErr := formatErr("indices", -1, "dataset is marked undirected but node 7 has out-degree %d and in-degree %d", out, out+1).Error()
	for _, procs := range []int{1, 4} {
		withProcs(procs, func() {
			if err := checkDegreeSymmetry("indices", bad); err == nil || err.Error() != wantErr {
				t.Errorf("GOMAXPROCS %d: %v, want %s", procs, err, wantErr)
			}
		})
	}
	// Counted directly, node counts per goroutine (under degreeDirectMax
	// nodes): the same counts for any number of CPUs.
	direct := symmetricGraph(50_000, 24, 4) // 1.2M edges
	want = make([]int64, direct.NumRows)
	for _, v := range direct.Indices {
		want[v]++
	}
	for _, procs := range []int{1, 3} {
		got := inDegrees[int32](direct.Indices, direct.NumRows, procs)
		for v := range want {
			if int64(got[v]) != want[v] {
				t.Fatalf("%d CPUs, direct count: node %d counted %d times, want %d", procs, v, got[v], want[v])
			}
		}
	}
	// A graph smaller than a block.
	small := symmetricGraph(100, 4, 3)
	small.Indices[0] = (small.Indices[0] + 1) % 100
	if err := checkDegreeSymmetry("indices", small); err == nil {
		t.Error("an asymmetric 100-node graph passed")
	}
}

func TestRowNormalizeParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, dim = 40_000, 64 // 2.56M values: several chunks
	x := make([]float32, rows*dim)
	for i := range x {
		x[i] = r.Float32()
	}
	for i := range dim {
		x[5*dim+i] = 0 // a zero row is copied
	}
	var one, many []float32
	withProcs(1, func() { one = RowNormalize(x, dim) })
	withProcs(8, func() { many = RowNormalize(x, dim) })
	if !reflect.DeepEqual(one, many) {
		t.Fatal("RowNormalize differs between 1 and 8 CPUs")
	}
	// Row 7 by hand.
	var s float64
	for _, v := range x[7*dim : 8*dim] {
		s += float64(v)
	}
	if got, want := one[7*dim+3], float32(float64(x[7*dim+3])/s); got != want {
		t.Fatalf("row 7 col 3 = %v, want %v", got, want)
	}
}

// Validated holds for what Open returned and nothing else.
func TestValidated(t *testing.T) {
	dir, mem := writeTiny(t)
	if mem.Validated() {
		t.Fatal("an in-memory dataset claims Open's validation")
	}
	var phases []string
	d, err := Open(dir, OpenOptions{OnPhase: func(p string, dur time.Duration) {
		if dur < 0 {
			t.Errorf("phase %s took %v", p, dur)
		}
		phases = append(phases, p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if strings.Join(phases, ",") != "open,verify,validate" {
		t.Errorf("phases %v, want open, verify, validate", phases)
	}
	if !d.Validated() {
		t.Fatal("an opened dataset is not Validated")
	}
	c := *d
	c.Graph = &graph.CSR{NumRows: 5, NumCols: 5, Indptr: d.Graph.Indptr, Indices: d.Graph.Indices}
	if c.Validated() {
		t.Fatal("a dataset with another graph claims Open's validation")
	}
	if d.WithRowNormalizedFeatures().Validated() {
		t.Fatal("a copy with other features claims Open's validation")
	}
	heap, err := Open(dir, OpenOptions{NoMmap: true, SkipChecksums: true, OnPhase: func(p string, _ time.Duration) {
		if p == "verify" {
			t.Error("verify reported with SkipChecksums")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if heap.Validated() {
		t.Fatal("writable (NoMmap) arrays claim Open's validation")
	}
}
