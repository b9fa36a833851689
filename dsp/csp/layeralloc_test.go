package csp

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
)

// layerAllocateRef is LayerAllocate as it was first written (a binary
// search per draw, Floyd's set in a map), kept as the definition the fast
// code must match; sort.Search stands for the package's firstAbove so the
// two share no code.
func layerAllocateRef(f int, replace bool, key sample.Key, hop int, deg []int64, wt []float64) []int64 {
	alloc := make([]int64, len(deg))
	if f < 0 {
		copy(alloc, deg)
		return alloc
	}
	st := rng.NewStream(rng.Derive(key.Seed, tagLayerAlloc, uint64(key.Epoch), uint64(key.Batch), uint64(hop)))
	if replace {
		cum := make([]float64, len(wt))
		var sum float64
		for i, w := range wt {
			sum += w
			cum[i] = sum
		}
		if !(sum > 0) {
			return alloc
		}
		for range f {
			u := (1 - st.OpenFloat64()) * sum // [0, sum)
			i := sort.Search(len(cum), func(i int) bool { return cum[i] > u })
			if i == len(cum) { // rounding at the top end
				i = len(cum) - 1
				for wt[i] == 0 {
					i--
				}
			}
			alloc[i]++
		}
		return alloc
	}
	var total int64
	cum := make([]int64, len(deg))
	for i, d := range deg {
		total += d
		cum[i] = total
	}
	k := min(int64(f), total)
	if k == total {
		copy(alloc, deg)
		return alloc
	}
	chosen := make(map[int64]struct{}, k)
	for j := total - k; j < total; j++ {
		t := int64(st.Below(uint64(j + 1)))
		if _, dup := chosen[t]; dup {
			t = j
		}
		chosen[t] = struct{}{}
	}
	for t := range chosen {
		alloc[sort.Search(len(cum), func(i int) bool { return cum[i] > t })]++
	}
	return alloc
}

// allocCase is one LayerAllocate input.
type allocCase struct {
	name    string
	f       int
	replace bool
	key     sample.Key
	deg     []int64
	wt      []float64
}

// tryAllocate runs fn and turns a panic into its message, so a case that
// makes the reference panic must make the fast code panic too.
func tryAllocate(fn func() []int64) (a []int64, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprint(r)
		}
	}()
	return fn(), ""
}

func checkAllocCase(t *testing.T, c allocCase) {
	t.Helper()
	want, wp := tryAllocate(func() []int64 { return layerAllocateRef(c.f, c.replace, c.key, 1, c.deg, c.wt) })
	got, gp := tryAllocate(func() []int64 { return LayerAllocate(c.f, c.replace, c.key, 1, c.deg, c.wt) })
	if (wp != "") != (gp != "") {
		t.Fatalf("%s (f=%d replace=%v, %d nodes): reference panic %q, LayerAllocate panic %q", c.name, c.f, c.replace, len(c.deg), wp, gp)
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s (f=%d replace=%v, %d nodes, key %+v): node %d of %d/%d differs: got %v, want %v",
			c.name, c.f, c.replace, len(c.deg), c.key, i, len(got), len(want), got[i:min(i+5, len(got))], want[i:min(i+5, len(want))])
	}
}

// randomAllocCases draws frontiers of every shape: sizes 0..3000, degree
// laws with zeros, long rows and all-zero frontiers, weights equal to the
// degrees or drawn (zeros, tiny, huge), and budgets from 0 past the
// frontier's edges, and -1.
func randomAllocCases(seed uint64, count int) []allocCase {
	s := rng.NewStream(seed)
	below := func(n int) int { return int(s.Below(uint64(n))) }
	cases := make([]allocCase, 0, count)
	for c := range count {
		var n int
		switch below(4) {
		case 0:
			n = below(4) // 0..3 nodes
		case 1:
			n = 1 + below(30)
		default:
			n = 1 + below(3000)
		}
		deg, wt := make([]int64, n), make([]float64, n)
		law := below(6)
		for i := range deg {
			switch law {
			case 0: // degrees 1..200
				deg[i] = 1 + int64(below(200))
			case 1: // many empty rows
				if below(3) == 0 {
					deg[i] = int64(below(50))
				}
			case 2: // long rows (the sparse case: many more slots than draws)
				deg[i] = int64(below(200_000))
			case 3: // all empty
			case 4: // mostly degree 1, a few long
				deg[i] = 1
				if below(50) == 0 {
					deg[i] = int64(below(100_000))
				}
			default:
				deg[i] = int64(below(8))
			}
		}
		wlaw := below(5)
		for i, d := range deg {
			switch wlaw {
			case 0, 1: // the degrees (unweighted)
				wt[i] = float64(d)
			case 2: // drawn, with zeros
				if below(4) > 0 {
					wt[i] = s.OpenFloat64() * 10
				}
			case 3: // tiny and huge
				wt[i] = math.Ldexp(s.OpenFloat64(), below(600)-300)
			default: // summed float32 weights, as the owners send
				for range min(d, 20) {
					wt[i] += float64(float32(s.OpenFloat64()))
				}
			}
		}
		var total int64
		for _, d := range deg {
			total += d
		}
		var f int
		switch below(7) {
		case 0:
			f = 0
		case 1:
			f = -1
		case 2:
			f = 1 + below(10)
		case 3:
			f = int(total) + below(3) - 1 // around every edge
		case 4:
			f = int(total) + 1 + below(1000) // more than every edge
		default:
			f = 1 + below(20_000)
		}
		if f > 50_000 { // keep the reference's map and draws small
			f = 1 + below(50_000)
		}
		f = max(f, -1)
		cases = append(cases, allocCase{
			name: fmt.Sprintf("random %d (degrees %d, weights %d)", c, law, wlaw),
			f:    f, replace: below(2) == 0,
			key: sample.Key{Seed: s.Uint64(), Epoch: below(5), Batch: below(1000)},
			deg: deg, wt: wt,
		})
	}
	return cases
}

// TestLayerAllocateMatchesReference: the fast LayerAllocate gives the
// reference's counts on random frontiers and budgets, with and without
// replacement, through both of Floyd's sets (bitset and table).
func TestLayerAllocateMatchesReference(t *testing.T) {
	count := 1500
	if testing.Short() {
		count = 300
	}
	for _, c := range randomAllocCases(11, count) {
		checkAllocCase(t, c)
	}
}

// TestLayerAllocateEdgeCases compares the fast and reference code on
// hand-made inputs: empty and single-node frontiers, zero budgets, budgets
// at and past the frontier's edges, -1, zero degrees and weights, and
// inputs outside the callers' contract (negative, NaN and infinite
// degrees or weights, mismatched lengths), where even a panic must agree.
func TestLayerAllocateEdgeCases(t *testing.T) {
	key := sample.Key{Seed: 9, Epoch: 2, Batch: 7}
	inf, nan := math.Inf(1), math.NaN()
	type in struct {
		name string
		deg  []int64
		wt   []float64 // nil: the degrees
	}
	ins := []in{
		{"empty", nil, nil},
		{"single", []int64{7}, nil},
		{"single zero", []int64{0}, nil},
		{"single weighted", []int64{3}, []float64{0.25}},
		{"zeros", []int64{0, 0, 0}, nil},
		{"zero ends", []int64{0, 0, 4, 0, 2, 0, 0}, nil},
		{"zero weights", []int64{3, 5, 2, 8}, []float64{0, 1.5, 0, 0}},
		{"zero weight last", []int64{3, 5, 2, 8}, []float64{1, 2, 3, 0}},
		{"all zero weights", []int64{3, 5}, []float64{0, 0}},
		{"denormal weights", []int64{1, 1, 1}, []float64{5e-324, 0, 1e-320}},
		{"huge weights", []int64{1, 1, 1}, []float64{1e307, 1e300, 1e307}},
		{"infinite weight sum", []int64{1, 1}, []float64{1e308, 1e308}},
		{"infinite weight", []int64{1, 1}, []float64{1, inf}},
		{"NaN weight", []int64{1, 1}, []float64{nan, 1}},
		{"negative weight", []int64{4, 4, 4}, []float64{2, -1, 3}},
		{"negative zero weight", []int64{4, 4}, []float64{math.Copysign(0, -1), 3}},
		{"negative degree", []int64{5, -3, 4}, nil},
		{"overflowing degrees", []int64{math.MaxInt64, 2, 3}, []float64{1, 1, 1}},
		{"short weights", []int64{3, 4, 5}, []float64{1, 2}},
		{"long weights", []int64{3}, []float64{1, 2, 3}},
		{"one long row", []int64{1, 1_000_000_000, 1}, nil},
		{"long rows", []int64{300_000, 0, 200_000, 500_000}, nil},
	}
	for _, x := range ins {
		wt := x.wt
		if wt == nil {
			wt = make([]float64, len(x.deg))
			for i, d := range x.deg {
				wt[i] = float64(d)
			}
		}
		var total int64
		for _, d := range x.deg {
			if d > 0 && total < math.MaxInt32 {
				total += d
			}
		}
		fs := []int{-1, 0, 1, 2, 5, 1000}
		if total < 100_000 {
			fs = append(fs, int(total)-1, int(total), int(total)+1)
		}
		for _, f := range fs {
			for _, replace := range []bool{false, true} {
				for b := range 3 {
					checkAllocCase(t, allocCase{name: x.name, f: max(f, -1), replace: replace,
						key: sample.Key{Seed: key.Seed, Epoch: key.Epoch, Batch: key.Batch + b}, deg: x.deg, wt: wt})
				}
			}
		}
	}
}

// TestLayerAllocateDistinctSets checks both of Floyd's sets on shapes
// chosen to land on each side of the bitset/table switch, with budgets up
// to the frontier's edges.
func TestLayerAllocateDistinctSets(t *testing.T) {
	for _, x := range []struct {
		name string
		n    int
		deg  int64
	}{{"dense (bitset)", 500, 30}, {"sparse (table)", 20, 1_000_000}, {"one node, sparse", 1, 50_000_000}} {
		deg := make([]int64, x.n)
		var total int64
		for i := range deg {
			deg[i] = 1 + (int64(i)*7919)%x.deg
			total += deg[i]
		}
		for _, f := range []int{1, 3, 64, 1000, 4096, int(min(total-1, 50_000))} {
			for b := range 4 {
				checkAllocCase(t, allocCase{name: x.name, f: f, key: sample.Key{Seed: 3, Batch: b}, deg: deg})
			}
		}
	}
}

// TestLayerAllocateConcurrent runs LayerAllocate from several goroutines
// (the GPU samplers' hops may overlap): the pooled buffers are never
// shared, so every call still gives the reference's counts.
func TestLayerAllocateConcurrent(t *testing.T) {
	cases := randomAllocCases(12, 64)
	want := make([][]int64, len(cases))
	for i, c := range cases {
		want[i] = layerAllocateRef(c.f, c.replace, c.key, 1, c.deg, c.wt)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for r := range 3 {
				for i := range cases {
					c := cases[(i+g*17+r)%len(cases)]
					if got := LayerAllocate(c.f, c.replace, c.key, 1, c.deg, c.wt); !slices.Equal(got, want[(i+g*17+r)%len(cases)]) {
						t.Errorf("goroutine %d: %s differs from the reference", g, c.name)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkLayerAllocateReference is BenchmarkLayerAllocate's shapes with
// the reference code (the speed-up's baseline, in the same run).
func BenchmarkLayerAllocateReference(b *testing.B) {
	benchLayerAllocate(b, layerAllocateRef)
}

// TestLayerAllocateMatchesCounts pins LayerAllocate's totals: every
// budget is spent on nodes with edges (with positive weight when
// weighted), never more than a node's degree without replacement.
func TestLayerAllocateMatchesCounts(t *testing.T) {
	deg := []int64{3, 0, 5, 1, 0, 7}
	wt := []float64{0.5, 0, 0, 2, 0, 1.25}
	key := sample.Key{Seed: 4, Epoch: 1, Batch: 2}
	for _, c := range []struct {
		f       int
		replace bool
		wt      []float64
		want    int64
	}{{10, false, nil, 10}, {100, false, nil, 16}, {-1, false, nil, 16}, {25, true, nil, 25}, {25, true, wt, 25}, {-1, true, nil, 16}} {
		w := c.wt
		if w == nil {
			w = make([]float64, len(deg))
			for i, d := range deg {
				w[i] = float64(d)
			}
		}
		a := LayerAllocate(c.f, c.replace, key, 1, deg, w)
		var sum int64
		for i, k := range a {
			sum += k
			if k > 0 && (w[i] == 0 || (!c.replace && k > deg[i])) {
				t.Errorf("f=%d replace=%v: node %d (degree %d, weight %v) gets %d", c.f, c.replace, i, deg[i], w[i], k)
			}
		}
		if sum != c.want {
			t.Errorf("f=%d replace=%v weights=%v: %d edges allotted, want %d", c.f, c.replace, c.wt != nil, sum, c.want)
		}
		if b := LayerAllocate(c.f, c.replace, key, 1, deg, w); !slices.Equal(a, b) {
			t.Errorf("f=%d: not deterministic", c.f)
		}
	}
}

// BenchmarkLayerAllocate is the host's part of a layer-wise hop on GPUs:
// the requester's allocation of a layer's budget over its frontier
// (LayerAllocate), for a frontier of 10k nodes of degree 1..200 and budgets
// of 8192 edges; "sparse" has degrees 1..200,000 (Floyd's table instead
// of its bitset).
func BenchmarkLayerAllocate(b *testing.B) {
	benchLayerAllocate(b, LayerAllocate)
}

func benchLayerAllocate(b *testing.B, alloc func(f int, replace bool, key sample.Key, hop int, deg []int64, wt []float64) []int64) {
	const n = 10000
	for _, c := range []struct {
		name    string
		replace bool
		maxDeg  int
	}{{"replace=false", false, 200}, {"replace=true", true, 200}, {"replace=false,sparse", false, 200_000}} {
		deg, wt := make([]int64, n), make([]float64, n)
		for i := range deg {
			deg[i] = int64(1 + (i*7919)%c.maxDeg)
			wt[i] = float64(deg[i])
		}
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				alloc(8192, c.replace, sample.Key{Seed: 1, Batch: i}, 1, deg, wt)
			}
		})
	}
}
