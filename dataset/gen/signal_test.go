package gen

import (
	"github.com/strata-gnn/strata/dataset"
)

// signal fits a nearest-centroid classifier (class means of the training
// nodes) on raw features and on neighbor-averaged features (self plus
// neighbors, one propagation step), and returns the test accuracy of each.
func signal(d *dataset.Dataset) (raw, agg float64) {
	n, dim, C := d.NumNodes(), int64(d.FeatDim), d.NumClasses
	g := d.Graph
	smooth := make([]float32, n*dim)
	for u := range n {
		row := smooth[u*dim : (u+1)*dim]
		copy(row, d.Features[u*dim:(u+1)*dim])
		for _, v := range g.Indices[g.Indptr[u]:g.Indptr[u+1]] {
			for j, x := range d.Features[int64(v)*dim : int64(v+1)*dim] {
				row[j] += x
			}
		}
		inv := 1 / float32(1+g.Indptr[u+1]-g.Indptr[u])
		for j := range row {
			row[j] *= inv
		}
	}
	acc := func(x []float32) float64 {
		cent := make([]float64, int64(C)*dim)
		cnt := make([]float64, C)
		for _, u := range d.Train {
			k := int64(d.Labels[u])
			cnt[k]++
			for j := range dim {
				cent[k*dim+j] += float64(x[int64(u)*dim+j])
			}
		}
		for k := range int64(C) {
			for j := range dim {
				if cnt[k] > 0 {
					cent[k*dim+j] /= cnt[k]
				}
			}
		}
		var ok int
		for _, u := range d.Test {
			best, bestD := -1, 0.0
			for k := range C {
				if cnt[k] == 0 {
					continue
				}
				var dist float64
				for j := range dim {
					e := float64(x[int64(u)*dim+j]) - cent[int64(k)*dim+j]
					dist += e * e
				}
				if best < 0 || dist < bestD {
					best, bestD = k, dist
				}
			}
			if int32(best) == d.Labels[u] {
				ok++
			}
		}
		return float64(ok) / float64(len(d.Test))
	}
	return acc(d.Features), acc(smooth)
}
