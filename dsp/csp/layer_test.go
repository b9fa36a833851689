package csp

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

var layerConfigs = []struct {
	name string
	cfg  Config
}{
	{"replace", Config{Fanouts: []int{40, 60}, Replace: true}},
	{"no-replace", Config{Fanouts: []int{40, 60}}},
	{"weighted-replace", Config{Fanouts: []int{30, 50, 20}, Replace: true, Weighted: true}},
	{"all-then-replace", Config{Fanouts: []int{-1, 25}, Replace: true}},
}

// layerBatches samples one batch per device with a k-device group.
func layerBatches(t *testing.T, g *graph.CSR, b *book.Book, cfg Config, seeds [][]graph.NodeID, keys []sample.Key) []*sample.MiniBatch {
	t.Helper()
	k := b.K()
	ps := patches(t, g, b, 3000)
	out := make([]*sample.MiniBatch, k)
	mustGroup(t, k, func(r int, c comm.Comm) error {
		s, err := NewLayerSampler(c, b, ps[r], cfg, nil)
		if err != nil {
			return err
		}
		out[r], err = s.Sample(seeds[r], keys[r])
		return err
	})
	return out
}

// TestLayerDeterministicAcrossDevices: a batch depends only on (graph,
// seeds, key), not on the number of devices or the partition.
func TestLayerDeterministicAcrossDevices(t *testing.T) {
	n := int64(500)
	g := randomGraph(t, 11, n, 10)
	for _, tc := range layerConfigs {
		t.Run(tc.name, func(t *testing.T) {
			const maxK = 4
			seeds := make([][]graph.NodeID, maxK)
			keys := make([]sample.Key, maxK)
			for r := range maxK {
				seeds[r] = randomSeeds(uint64(50+r), n, 10+5*r)
				keys[r] = sample.Key{Seed: 3, Epoch: 1, Batch: r}
			}
			// Reference: each batch alone on one device.
			want := make([]*sample.MiniBatch, maxK)
			one := randomBook(t, 0, n, 1)
			for r := range maxK {
				want[r] = layerBatches(t, g, one, tc.cfg, seeds[r:r+1], keys[r:r+1])[0]
				checkLayerBatch(t, g, tc.cfg, want[r])
			}
			for k := 2; k <= maxK; k++ {
				got := layerBatches(t, g, randomBook(t, uint64(k), n, k), tc.cfg, seeds[:k], keys[:k])
				for r := range k {
					if !sameBatch(got[r], want[r]) {
						t.Fatalf("%d devices, rank %d: batch differs from the 1-device batch", k, r)
					}
				}
			}
		})
	}
}

// checkLayerBatch verifies that every sampled edge exists and that each
// layer has the number of edges the config asks for.
func checkLayerBatch(t *testing.T, g *graph.CSR, cfg Config, mb *sample.MiniBatch) {
	t.Helper()
	hops := len(mb.Blocks)
	for h := range hops {
		blk := &mb.Blocks[hops-1-h] // hop h builds block hops-1-h
		var frontierEdges int64
		var positive bool
		for i := 0; i < blk.NumDst; i++ {
			v := blk.SrcNodes[i]
			frontierEdges += g.Degree(v)
			for _, w := range g.Weights[g.Indptr[v]:g.Indptr[v+1]] {
				positive = positive || w > 0
			}
			seen := map[int64]bool{}
			for e := blk.Indptr[i]; e < blk.Indptr[i+1]; e++ {
				eid := blk.EdgeIDs[e]
				if eid < g.Indptr[v] || eid >= g.Indptr[v+1] {
					t.Fatalf("hop %d: edge %d is not in row %d", h, eid, v)
				}
				if g.Indices[eid] != blk.SrcNodes[blk.Indices[e]] {
					t.Fatalf("hop %d: edge %d leads to %d, block says %d", h, eid, g.Indices[eid], blk.SrcNodes[blk.Indices[e]])
				}
				if cfg.Weighted && g.Weights[eid] == 0 {
					t.Fatalf("hop %d: drew zero-weight edge %d", h, eid)
				}
				if !cfg.Replace && seen[eid] {
					t.Fatalf("hop %d: edge %d drawn twice without replacement", h, eid)
				}
				seen[eid] = true
			}
		}
		f := int64(cfg.Fanouts[h])
		want := f
		switch {
		case f < 0:
			want = frontierEdges
		case !cfg.Replace:
			want = min(f, frontierEdges)
		case frontierEdges == 0 || (cfg.Weighted && !positive):
			want = 0
		}
		if got := int64(blk.NumEdges()); got != want {
			t.Fatalf("hop %d: %d edges, want %d (fanout %d, frontier of %d edges)", h, got, want, f, frontierEdges)
		}
	}
}

// TestLayerAllocationLaw: with replacement, a frontier node receives each
// draw with probability degree/sum(degrees); over many batches the mean
// allotment of every seed is within 5 standard errors of that.
func TestLayerAllocationLaw(t *testing.T) {
	n := int64(200)
	g := randomGraph(t, 12, n, 6)
	seeds := randomSeeds(7, n, 12)
	var sum int64
	for _, v := range seeds {
		sum += g.Degree(v)
	}
	const f, trials = 30, 300
	counts := make([]float64, len(seeds))
	b := randomBook(t, 1, n, 2)
	ps := patches(t, g, b, layout.NoLimit)
	mustGroup(t, 2, func(r int, c comm.Comm) error {
		s, err := NewLayerSampler(c, b, ps[r], Config{Fanouts: []int{f}, Replace: true}, nil)
		if err != nil {
			return err
		}
		for i := range trials {
			my := seeds
			if r == 1 {
				my = nil
			}
			mb, err := s.Sample(my, sample.Key{Seed: 1, Batch: i})
			if err != nil {
				return err
			}
			if r == 0 {
				blk := &mb.Blocks[0]
				for j := range seeds {
					counts[j] += float64(blk.Indptr[j+1] - blk.Indptr[j])
				}
			}
		}
		return nil
	})
	for j, v := range seeds {
		p := float64(g.Degree(v)) / float64(sum)
		mean := counts[j] / trials
		se := sqrt(f*p*(1-p)/trials) + 1e-9
		if d := mean - f*p; d > 5*se || d < -5*se {
			t.Errorf("seed %d (degree %d): mean allotment %.3f, want %.3f +- %.3f", v, g.Degree(v), mean, f*p, 5*se)
		}
	}
}

func sqrt(x float64) float64 {
	z := x
	for range 60 {
		if z == 0 {
			return 0
		}
		z = (z + x/z) / 2
	}
	return z
}

func TestLayerConfigErrors(t *testing.T) {
	g := randomGraph(t, 4, 50, 5)
	b := randomBook(t, 6, 50, 1)
	ps := patches(t, g, b, layout.NoLimit)
	mustGroup(t, 1, func(r int, c comm.Comm) error {
		for _, cfg := range []Config{{}, {Fanouts: []int{0}}, {Fanouts: []int{5}, Weighted: true}} {
			if _, err := NewLayerSampler(c, b, ps[r], cfg, nil); !errors.Is(err, ErrInput) {
				return fmt.Errorf("config %+v: %v", cfg, err)
			}
		}
		return nil
	})
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
// (csp's RNG), for a frontier of 10k nodes of degree 1..200 and budgets
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
