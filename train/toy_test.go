package train

import (
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// toyDataset builds a small homophilous graph: n nodes in k classes, each
// node linked (both directions) to about 4 nodes of its class and 1 of
// another; sparse features are a noisy class indicator plus random words.
// Train/val/test are disjoint.
func toyDataset(n, k int) *dataset.Dataset {
	s := rng.NewStream(12345)
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(i % k)
	}
	adj := make([]map[int32]bool, n)
	for i := range adj {
		adj[i] = map[int32]bool{}
	}
	link := func(a, b int32) {
		if a != b {
			adj[a][b], adj[b][a] = true, true
		}
	}
	for i := 0; i < n; i++ {
		for j := 0; j < 2; j++ {
			// Same class: nodes congruent mod k.
			o := int32((int(s.Below(uint64(n/k)))*k + i%k) % n)
			link(int32(i), o)
		}
		if s.Below(2) == 0 {
			link(int32(i), int32(s.Below(uint64(n))))
		}
	}
	indptr := make([]int64, n+1)
	var indices []int32
	for i := 0; i < n; i++ {
		for v := int32(0); v < int32(n); v++ {
			if adj[i][v] {
				indices = append(indices, v)
			}
		}
		indptr[i+1] = int64(len(indices))
	}
	const dim = 40
	feats := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		if s.Below(10) < 6 { // 60% of nodes show their class word
			feats[i*dim+int(labels[i])] = 1
		}
		for w := 0; w < 3; w++ {
			feats[i*dim+k+int(s.Below(dim-uint64(k)))] = 1
		}
	}
	ds := &dataset.Dataset{
		Name:    "toy",
		Graph:   &graph.CSR{NumRows: int64(n), NumCols: int64(n), Indptr: indptr, Indices: indices},
		FeatDim: dim, Features: feats, NumClasses: k, Labels: labels,
	}
	for i := 0; i < n; i++ {
		switch {
		case i < 10*k:
			ds.Train = append(ds.Train, int32(i))
		case i < 10*k+n/4:
			ds.Val = append(ds.Val, int32(i))
		default:
			ds.Test = append(ds.Test, int32(i))
		}
	}
	return ds
}
