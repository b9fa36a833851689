package partition

import (
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// fromPairs builds the symmetric graph of n nodes with the given
// undirected edges.
func fromPairs(n int64, pairs [][2]int32) *graph.CSR {
	var src, dst []int32
	for _, p := range pairs {
		src = append(src, p[0])
		dst = append(dst, p[1])
	}
	g, err := graph.FromEdges(n, src, dst)
	if err != nil {
		panic(err)
	}
	s, err := Symmetrize(g)
	if err != nil {
		panic(err)
	}
	return s
}

// twoCliques returns two m-cliques (nodes 0..m-1 and m..2m-1) joined by
// the single edge (m-1, m).
func twoCliques(m int32) *graph.CSR {
	var pairs [][2]int32
	for base := int32(0); base <= m; base += m {
		for i := int32(0); i < m; i++ {
			for j := i + 1; j < m; j++ {
				pairs = append(pairs, [2]int32{base + i, base + j})
			}
		}
	}
	pairs = append(pairs, [2]int32{m - 1, m})
	return fromPairs(int64(2*m), pairs)
}

// grid returns the w x h grid graph (4-neighborhood); node (x, y) is y*w+x.
func grid(w, h int32) *graph.CSR {
	var pairs [][2]int32
	for y := int32(0); y < h; y++ {
		for x := int32(0); x < w; x++ {
			v := y*w + x
			if x+1 < w {
				pairs = append(pairs, [2]int32{v, v + 1})
			}
			if y+1 < h {
				pairs = append(pairs, [2]int32{v, v + w})
			}
		}
	}
	return fromPairs(int64(w*h), pairs)
}

// plantedGraph returns n nodes in c planted communities (node v is in
// community v%c, so communities are interleaved in ID order), each node
// with about deg random edges, a fraction pin of them inside its
// community; plus a few hubs of high degree, to exercise 2-hop matching.
func plantedGraph(n, c int32, deg int, pin float64, seed uint64) *graph.CSR {
	s := rng.NewStream(seed)
	var pairs [][2]int32
	per := n / c
	for v := int32(0); v < n; v++ {
		for range deg / 2 {
			var u int32
			if s.Uniform01() < float32(pin) {
				u = int32(s.Below(uint64(per)))*c + v%c
			} else {
				u = int32(s.Below(uint64(n)))
			}
			if u < n && u != v {
				pairs = append(pairs, [2]int32{v, u})
			}
		}
	}
	// Hubs: node h links to many low-ID nodes of its community.
	for h := int32(0); h < c && h < n; h++ {
		for range 200 {
			u := int32(s.Below(uint64(per)))*c + h%c
			if u < n && u != h {
				pairs = append(pairs, [2]int32{h, u})
			}
		}
	}
	return fromPairs(int64(n), pairs)
}

// randomParts returns a random assignment of n nodes to k parts.
func randomParts(n, k int, seed uint64) []int32 {
	s := rng.NewStream(seed)
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(s.Below(uint64(k)))
	}
	return p
}
