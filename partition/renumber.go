package partition

import (
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

// Renumbering relabels nodes so that every part owns one contiguous range
// of IDs: part p gets [Book.Range(p)), in increasing order of the old IDs
// (which keeps whatever locality the old order had).
type Renumbering struct {
	Book     *book.Book
	OldToNew []int32 // OldToNew[old] = new ID
	NewToOld []int32 // NewToOld[new] = old ID
}

// Renumber builds the renumbering of a partition into k parts.
func Renumber(parts []int32, k int) (*Renumbering, error) {
	if k < 1 || k > MaxParts {
		return nil, inputErr("k = %d not in [1, %d]", k, MaxParts)
	}
	if int64(len(parts)) > book.MaxNodes {
		return nil, inputErr("%d nodes exceed %d", len(parts), int64(book.MaxNodes))
	}
	counts := make([]int64, k)
	for v, p := range parts {
		if p < 0 || int(p) >= k {
			return nil, inputErr("node %d is in part %d, not in [0, %d)", v, p, k)
		}
		counts[p]++
	}
	b, err := book.FromCounts(counts)
	if err != nil {
		return nil, err
	}
	next := b.Offsets()[:k]
	r := &Renumbering{Book: b, OldToNew: make([]int32, len(parts)), NewToOld: make([]int32, len(parts))}
	for v, p := range parts {
		u := next[p]
		next[p]++
		r.OldToNew[v] = int32(u)
		r.NewToOld[u] = int32(v)
	}
	return r, nil
}

// Parts returns the part of every old node ID.
func (r *Renumbering) Parts() []int32 {
	parts := make([]int32, len(r.OldToNew))
	for v, u := range r.OldToNew {
		parts[v] = int32(r.Book.Owner(int64(u)))
	}
	return parts
}

// Apply returns d with its nodes renumbered (see PermuteDataset).
func (r *Renumbering) Apply(d *dataset.Dataset) (*dataset.Dataset, error) {
	return PermuteDataset(d, r.OldToNew)
}

// Inverse returns the inverse of a permutation given as oldToNew, checking
// that it is one.
func Inverse(oldToNew []int32) ([]int32, error) {
	inv := make([]int32, len(oldToNew))
	for i := range inv {
		inv[i] = -1
	}
	for v, u := range oldToNew {
		if u < 0 || int(u) >= len(oldToNew) {
			return nil, inputErr("permutation maps %d to %d, not in [0, %d)", v, u, len(oldToNew))
		}
		if inv[u] >= 0 {
			return nil, inputErr("permutation maps both %d and %d to %d", inv[u], v, u)
		}
		inv[u] = int32(v)
	}
	return inv, nil
}

// PermuteDataset returns a copy of d whose node v is renamed oldToNew[v]:
// graph rows and columns (rows stay sorted, weights follow their edges),
// feature rows, labels, and the train/val/test IDs (kept ascending). d is
// not modified and may be memory-mapped.
func PermuteDataset(d *dataset.Dataset, oldToNew []int32) (*dataset.Dataset, error) {
	if d == nil || d.Graph == nil {
		return nil, inputErr("nil dataset")
	}
	g := d.Graph
	if err := g.Validate(); err != nil {
		return nil, err
	}
	n := g.NumRows
	if g.NumCols != n {
		return nil, inputErr("graph is %d x %d, not square", n, g.NumCols)
	}
	if int64(len(oldToNew)) != n {
		return nil, inputErr("permutation has %d entries for %d nodes", len(oldToNew), n)
	}
	newToOld, err := Inverse(oldToNew)
	if err != nil {
		return nil, err
	}
	out := &dataset.Dataset{Name: d.Name, Directed: d.Directed, FeatDim: d.FeatDim, NumClasses: d.NumClasses}
	pg := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1), Indices: make([]graph.NodeID, len(g.Indices))}
	if g.Weights != nil {
		pg.Weights = make([]float32, len(g.Weights))
	}
	for u := int64(0); u < n; u++ {
		v := newToOld[u]
		pg.Indptr[u+1] = pg.Indptr[u] + g.Indptr[v+1] - g.Indptr[v]
	}
	parallelFor(int(n), 1<<12, func(lo, hi int) {
		var tmp []weightedEdge
		for u := lo; u < hi; u++ {
			v := newToOld[u]
			src := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
			dst := pg.Indices[pg.Indptr[u]:pg.Indptr[u+1]]
			if g.Weights == nil {
				for i, x := range src {
					dst[i] = oldToNew[x]
				}
				slices.Sort(dst)
				continue
			}
			ws := g.Weights[g.Indptr[v]:g.Indptr[v+1]]
			tmp = tmp[:0]
			for i, x := range src {
				tmp = append(tmp, weightedEdge{oldToNew[x], ws[i]})
			}
			slices.SortStableFunc(tmp, func(a, b weightedEdge) int { return int(a.c) - int(b.c) })
			dw := pg.Weights[pg.Indptr[u]:pg.Indptr[u+1]]
			for i, t := range tmp {
				dst[i], dw[i] = t.c, t.w
			}
		}
	})
	out.Graph = pg
	if d.Features != nil {
		f := d.FeatDim
		if int64(len(d.Features)) != n*int64(f) {
			return nil, inputErr("features hold %d values, want %d x %d", len(d.Features), n, f)
		}
		out.Features = make([]float32, len(d.Features))
		parallelFor(int(n), 1<<12, func(lo, hi int) {
			for u := lo; u < hi; u++ {
				v := int(newToOld[u])
				copy(out.Features[u*f:(u+1)*f], d.Features[v*f:(v+1)*f])
			}
		})
	}
	if d.Labels != nil {
		if int64(len(d.Labels)) != n {
			return nil, inputErr("labels hold %d values for %d nodes", len(d.Labels), n)
		}
		out.Labels = make([]int32, n)
		for u := range out.Labels {
			out.Labels[u] = d.Labels[newToOld[u]]
		}
	}
	for _, sp := range []struct {
		in  []int32
		out *[]int32
	}{{d.Train, &out.Train}, {d.Val, &out.Val}, {d.Test, &out.Test}} {
		if sp.in == nil {
			continue
		}
		m := make([]int32, len(sp.in))
		for i, v := range sp.in {
			if v < 0 || int64(v) >= n {
				return nil, inputErr("split node %d (position %d) not in [0, %d)", v, i, n)
			}
			m[i] = oldToNew[v]
		}
		slices.Sort(m)
		*sp.out = m
	}
	return out, nil
}

type weightedEdge struct {
	c graph.NodeID
	w float32
}

// String summarizes the book: part sizes.
func (r *Renumbering) String() string {
	return fmt.Sprintf("%d parts over %d nodes", r.Book.K(), r.Book.NumNodes())
}
