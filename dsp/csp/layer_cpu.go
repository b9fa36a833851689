package csp

import (
	"math"
	"slices"
	"sort"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// cpuLayerMachine is the layer-wise machine of the CPU back end: the
// node-wise CPU machine for buffers, routing and relabeling, and every
// kernel of layer.cu plus gpusample's uniform draws (gs_draw_row) in Go.
type cpuLayerMachine struct {
	*cpuMachine
	lo, hi, n         int64 // the rows owned, the graph's nodes
	replace, weighted bool
	// Weighted sampling: each owned row's weight sum (float64 bits), the
	// running sums within each row (by position in the patch's indices)
	// and each row's last positive-weight edge.
	roww []int64
	cum  []float64
	last []int32
}

func newCPULayerMachine(be *cpu.Backend, patch *layout.Patch, offsets []int64, P int, cfg Config) *cpuLayerMachine {
	lo, hi := int64(patch.Lo), int64(patch.Hi)
	m := &cpuLayerMachine{cpuMachine: &cpuMachine{be: be, P: P, off: offsets, g: patch.Graph, edgeBase: patch.EdgeBase},
		lo: lo, hi: hi, n: patch.Graph.NumRows, replace: cfg.Replace, weighted: cfg.Weighted}
	if cfg.Weighted {
		m.roww, m.cum, m.last = LayerWeights(patch.Graph.Indptr[lo:hi+1], patch.Graph.Weights)
	}
	return m
}

func (m *cpuLayerMachine) w() int64 {
	if m.weighted {
		return 2
	}
	return 1
}

// Info is lw_info.
func (m *cpuLayerMachine) Info(ids backend.Buffer, R int64, out, bad backend.Buffer) error {
	w := m.w()
	o := i64s(out)
	if int64(len(o)) < R*w || int64(len(i32s(ids))) < R {
		return m.bad("info: %d words for %d nodes", len(o), R)
	}
	for i, v := range i32s(ids)[:R] {
		var d, wb int64
		if int64(v) < m.lo || int64(v) >= m.hi {
			i64s(bad)[0]++
		} else {
			d = m.g.Indptr[v+1] - m.g.Indptr[v]
			if m.weighted {
				wb = m.roww[int64(v)-m.lo]
			}
		}
		o[int64(i)*w] = d
		if m.weighted {
			o[int64(i)*w+1] = wb
		}
	}
	return nil
}

// FrontierInfo is lw_frontier_info.
func (m *cpuLayerMachine) FrontierInfo(out, in, pos backend.Buffer, bptr []int64, nF int64) error {
	w, P := m.w(), int64(m.P)
	if len(bptr) != m.P+1 || bptr[P] != nF {
		return m.bad("frontierInfo: bptr %v for %d nodes", bptr, nF)
	}
	o, x := i64s(out), i64s(in)
	for j := range nF {
		q := edgeRow(bptr, P, j)
		i := int64(i32s(pos)[j])
		o[i*w] = x[j*w]&(1<<ownerShift-1) | q<<ownerShift
		if m.weighted {
			o[i*w+1] = x[j*w+1]
		}
	}
	return nil
}

// PackAlloc is lw_pack_alloc.
func (m *cpuLayerMachine) PackAlloc(allocG, msg, allocF, pos backend.Buffer, bptr, hdr []int64, nF int64) error {
	P := int64(m.P)
	g, ms := i64s(allocG), i64s(msg)
	if len(hdr) != 2*m.P || len(bptr) != m.P+1 || int64(len(ms)) < nF+2*P || int64(len(g)) < nF+1 {
		return m.bad("packAlloc: hdr %d, bptr %d, msg %d for %d nodes", len(hdr), len(bptr), len(ms), nF)
	}
	for j := range nF {
		q := edgeRow(bptr, P, j)
		a := i64s(allocF)[i32s(pos)[j]]
		g[j] = a
		ms[j+2*(q+1)] = a
	}
	g[nF] = 0
	for q := range P {
		ms[bptr[q]+2*q], ms[bptr[q]+2*q+1] = hdr[2*q], hdr[2*q+1]
	}
	return nil
}

// DrawLayer is lw_owner_counts, the scan, lw_owner_check, lw_guard, the
// -1 fill and the draws (gs_draw_row through DrawHop and csp_add_i64, or
// lw_draw_weighted).
func (m *cpuLayerMachine) DrawLayer(ids, info, msg backend.Buffer, R int64, roff, tot []int64, keys []uint64, src, eid backend.Buffer, E int64, bad backend.Buffer) error {
	P, w := int64(m.P), m.w()
	s, ei, bd := i32s(src), i64s(eid), i64s(bad)
	if len(roff) != m.P+1 || roff[P] != R || len(tot) != m.P || len(keys) != m.P || int64(len(s)) < E || int64(len(ei)) < E {
		return m.bad("drawLayer: roff %v, tot %v, %d keys, E %d", roff, tot, len(keys), E)
	}
	cnt := make([]int64, R+1)
	for i := range R {
		p := edgeRow(roff, P, i)
		k := i64s(msg)[i+2*(p+1)]
		d := i64s(info)[i*w]
		ok := k >= 0 && k <= MaxLayerFanout && !(k > 0 && d == 0) && (m.replace || k <= d)
		if ok && m.weighted && k > 0 {
			ok = math.Float64frombits(uint64(i64s(info)[i*w+1])) > 0
		}
		if !ok {
			bd[0]++
			k = 0
		}
		cnt[i] = k
	}
	qptr := make([]int64, R+1)
	exclusiveScan(qptr, cnt)
	for p := range P {
		if qptr[roff[p+1]]-qptr[roff[p]] != tot[p] {
			bd[0]++
		}
	}
	if bd[0] != 0 || qptr[R] > E {
		clear(qptr) // draw nothing: the step fails when it reads bad
	}
	for t := range E {
		s[t], ei[t] = -1, -1
	}
	for i := range R {
		p := edgeRow(roff, P, i)
		v := i32s(ids)[i]
		key := rng.Derive(keys[p], uint64(v))
		for j, e := range m.drawRow(key, v, qptr[i+1]-qptr[i]) {
			t := qptr[i] + int64(j)
			s[t], ei[t] = m.g.Indices[e], e+m.edgeBase
		}
	}
	return nil
}

// drawRow is node v's k draws (positions in the patch's indices) under
// key: gs_draw_row's uniform rules (all of the row, uniform with
// replacement, Floyd's algorithm kept sorted) or lw_draw_weighted's
// inverse CDF.
func (m *cpuLayerMachine) drawRow(key uint64, v graph.NodeID, k int64) []int64 {
	a, b := m.g.Indptr[v], m.g.Indptr[v+1]
	n := b - a
	out := make([]int64, 0, k)
	switch {
	case k == 0:
	case m.weighted:
		for j := range k {
			h := rng.Hash(key, uint64(j))
			open := float64(h>>11+1) * (1.0 / (1 << 53))
			u := (1 - open) * m.cum[b-1]
			e := sort.Search(int(n), func(e int) bool { return m.cum[a+int64(e)] > u })
			if e == int(n) {
				e = int(m.last[int64(v)-m.lo])
			}
			out = append(out, a+int64(e))
		}
	case k == n && !m.replace:
		for e := a; e < b; e++ {
			out = append(out, e)
		}
	case m.replace:
		for j := range k {
			out = append(out, a+int64(rng.Below(rng.Hash(key, uint64(j)), uint64(n))))
		}
	default:
		ctr := uint64(0)
		for j := n - k; j < n; j++ {
			t := a + int64(rng.Below(rng.Hash(key, ctr), uint64(j+1)))
			ctr++
			q, found := slices.BinarySearch(out, t)
			if found {
				out = append(out, a+j)
				continue
			}
			out = slices.Insert(out, q, t)
		}
	}
	return out
}

// UnpackLayer is the scan and lw_unpack.
func (m *cpuLayerMachine) UnpackLayer(src, eid, ans, ansE, ptr, allocG, pos backend.Buffer, nF, E int64, bad backend.Buffer) error {
	sptr := make([]int64, nF+1)
	exclusiveScan(sptr, i64s(allocG)[:nF+1])
	pt := i64s(ptr)
	if sptr[nF] != E || pt[nF] != E {
		return m.bad("unpackLayer: counts add up to %d, rows to %d, E %d", sptr[nF], pt[nF], E)
	}
	for t := range E {
		j := edgeRow(sptr, nF, t)
		d := pt[i32s(pos)[j]] + t - sptr[j]
		u := i32s(ans)[t]
		if u < 0 || int64(u) >= m.n {
			i64s(bad)[0]++
			u = 0
		}
		i32s(src)[d] = u
		i64s(eid)[d] = -1
		if ansE != nil {
			i64s(eid)[d] = i64s(ansE)[t]
		}
	}
	return nil
}

// LayerWeights computes, for the rows at offsets rp into weights, each
// row's weight sum (float64 bits), the running sums within each row, and
// each row's last positive-weight edge (-1: none), in float64
// arithmetic (the CUDA machine places the same arrays).
func LayerWeights(rp []int64, weights []float32) (roww []int64, cum []float64, last []int32) {
	rows := len(rp) - 1
	roww, last = make([]int64, rows), make([]int32, rows)
	cum = make([]float64, rp[rows]) // indexed by position in the patch's indices
	for r := range rows {
		var sum float64
		last[r] = -1
		for e := rp[r]; e < rp[r+1]; e++ {
			w := weights[e]
			sum += float64(w)
			cum[e] = sum
			if w != 0 {
				last[r] = int32(e - rp[r])
			}
		}
		roww[r] = int64(math.Float64bits(sum))
	}
	return roww, cum, last
}
