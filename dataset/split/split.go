package split

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// Fractions are the train, validation and test shares; each in [0, 1],
// their sum at most 1 (what is left is in no split).
type Fractions [3]float64

// Check reports fractions that are out of range, as a message naming
// them.
func (f Fractions) Check() error {
	sum := 0.0
	for i, x := range f {
		if math.IsNaN(x) || x < 0 || x > 1 {
			return fmt.Errorf("%s fraction %v: want a number in [0, 1]", names[i], x)
		}
		sum += x
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("fractions %v add up to %v: want at most 1", f[:], sum)
	}
	if sum == 0 {
		return fmt.Errorf("fractions %v are all 0", f[:])
	}
	return nil
}

var names = [3]string{"train", "val", "test"}

// counts splits n items by f with cumulative rounding, so the parts never
// exceed n and every fraction is met to within one item.
func (f Fractions) counts(n int) [3]int {
	var c [3]int
	acc, prev := 0.0, 0
	for i, x := range f {
		acc += x
		end := min(int(math.Round(acc*float64(n))), n)
		c[i] = max(end-prev, 0)
		prev = max(prev, end)
	}
	return c
}

// shuffle permutes ids in place (Fisher-Yates) with the stream of key.
func shuffle(ids []int32, key uint64) {
	s := rng.NewStream(key)
	for i := len(ids) - 1; i > 0; i-- {
		j := int(s.Below(uint64(i + 1)))
		ids[i], ids[j] = ids[j], ids[i]
	}
}

// Stream names, so node and edge splits of one seed are independent.
const (
	streamNodes = 0x6e6f646573 // "nodes"
	streamEdges = 0x6564676573 // "edges"
)

// Nodes splits the labeled nodes (label >= 0) into train, validation and
// test sets, each sorted ascending. Random: one seeded permutation of the
// labeled nodes, cut by f. Stratified: each class is permuted and cut by f
// on its own, so every split has the class proportions of the whole.
func Nodes(labels []int32, f Fractions, seed uint64, stratify bool) (train, val, test []int32, err error) {
	if err := f.Check(); err != nil {
		return nil, nil, nil, err
	}
	if len(labels) > dataset.MaxNodes {
		return nil, nil, nil, fmt.Errorf("split: %d labels for at most %d nodes", len(labels), int64(dataset.MaxNodes))
	}
	var out [3][]int32
	take := func(ids []int32, key uint64) {
		shuffle(ids, key)
		c := f.counts(len(ids))
		at := 0
		for i := range out {
			out[i] = append(out[i], ids[at:at+c[i]]...)
			at += c[i]
		}
	}
	if stratify {
		byClass := map[int32][]int32{}
		for v, l := range labels {
			if l >= 0 {
				byClass[l] = append(byClass[l], int32(v))
			}
		}
		classes := make([]int32, 0, len(byClass))
		for c := range byClass {
			classes = append(classes, c)
		}
		slices.Sort(classes)
		for _, c := range classes {
			take(byClass[c], rng.Derive(seed, streamNodes, 1, uint64(c)))
		}
	} else {
		var ids []int32
		for v, l := range labels {
			if l >= 0 {
				ids = append(ids, int32(v))
			}
		}
		take(ids, rng.Derive(seed, streamNodes, 0))
	}
	if len(out[0])+len(out[1])+len(out[2]) == 0 {
		return nil, nil, nil, fmt.Errorf("split: no labeled node to split")
	}
	for i := range out {
		slices.Sort(out[i])
		if out[i] == nil {
			out[i] = []int32{}
		}
	}
	return out[0], out[1], out[2], nil
}

// EdgeSplit is a split of a graph's edges for link prediction. Part i
// (0 train, 1 val, 2 test) lists edges Src[i][j] -> Dst[i][j], sorted by
// (src, dst); on an undirected graph every edge appears once, with
// src < dst, and stands for both directions.
type EdgeSplit struct {
	Directed  bool
	Seed      uint64
	Fractions Fractions
	Src, Dst  [3][]int32
	// The graph it was made for: for a relation of a typed dataset
	// (Relation set, RelationEdges), NumNodes counts the source type's
	// nodes, NumDstNodes the destination type's, NumEdges and GraphCRC
	// are the relation's (its in-adjacency, EdgeType.In), and Src and Dst
	// are IDs local to the two types.
	NumNodes, NumEdges int64
	GraphCRC           string
	Relation           string // "src___rel___dst"; "" for a homogeneous graph
	NumDstNodes        int64  // with Relation
}

// Edges splits d's edges: the candidates are the edges u -> v with u != v
// (directed) or the undirected edges {u, v} with u < v (d undirected);
// one seeded permutation of them is cut into test, validation and train
// parts by f (test first, so the held-out sets of two train fractions
// agree). Self-loops are in no part.
func Edges(d *dataset.Dataset, f Fractions, seed uint64) (*EdgeSplit, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	g := d.Graph
	var pool []int64 // edge positions in the CSR
	for u := range g.NumRows {
		for e := g.Indptr[u]; e < g.Indptr[u+1]; e++ {
			v := int64(g.Indices[e])
			if v != u && (d.Directed || u < v) {
				pool = append(pool, e)
			}
		}
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("split: the graph has no edge to split (self-loops are never held out)")
	}
	if int64(len(pool)) > math.MaxInt32 {
		return nil, fmt.Errorf("split: %d candidate edges; at most %d are supported", len(pool), math.MaxInt32)
	}
	s := &EdgeSplit{Directed: d.Directed, Seed: seed, Fractions: f, NumNodes: g.NumRows, NumEdges: g.NumEdges(), GraphCRC: GraphCRC(g)}
	for part, sel := range cutPool(len(pool), f, seed) {
		s.Src[part], s.Dst[part] = make([]int32, len(sel)), make([]int32, len(sel))
		for i, p := range sel {
			e := pool[p]
			s.Src[part][i] = int32(rowOf(g, e))
			s.Dst[part][i] = g.Indices[e]
		}
	}
	return s, nil
}

// cutPool is the documented draw of an edge split of n candidates (in
// (src, dst) order): one seeded permutation cut into test, validation
// and train parts by f, each part's candidate indices sorted, so each
// part is in (src, dst) order.
func cutPool(n int, f Fractions, seed uint64) [3][]int32 {
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	shuffle(perm, rng.Derive(seed, streamEdges))
	c := f.counts(n)
	var out [3][]int32
	at := 0
	for _, part := range []int{2, 1, 0} {
		out[part] = slices.Clone(perm[at : at+c[part]])
		at += c[part]
		slices.Sort(out[part])
	}
	return out
}

// rowOf returns the row holding CSR position e.
func rowOf(g *graph.CSR, e int64) int64 {
	r, _ := slices.BinarySearch(g.Indptr, e+1) // the first offset > e
	return int64(r - 1)
}

// GraphCRC is the CRC-32C of the graph's structure: indptr as
// little-endian int64, then indices as little-endian int32, as 8 hex
// digits. An edge split records it to refuse another graph.
func GraphCRC(g *graph.CSR) string {
	tab := crc32.MakeTable(crc32.Castagnoli)
	var c uint32
	buf := make([]byte, 0, 64<<10)
	flush := func() {
		c = crc32.Update(c, tab, buf)
		buf = buf[:0]
	}
	for _, x := range g.Indptr {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
		if len(buf) >= 64<<10-8 {
			flush()
		}
	}
	for _, x := range g.Indices {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(x))
		if len(buf) >= 64<<10-8 {
			flush()
		}
	}
	flush()
	return fmt.Sprintf("%08x", c)
}
