package csp

import (
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// cpuWalkMachine is the walk machine of the CPU back end: the node-wise
// CPU machine for buffers and routing, and every kernel of walk.cu in Go.
type cpuWalkMachine struct {
	*cpuMachine
	idOff  []int64 // 0, 1, ..., P: routes traces to their origins
	lo, hi int64   // the rows owned
	n      int64   // the graph's nodes
	length int
}

func newCPUWalkMachine(be *cpu.Backend, patch *layout.Patch, offsets []int64, P, length int) *cpuWalkMachine {
	id := make([]int64, P+1)
	for i := range id {
		id[i] = int64(i)
	}
	return &cpuWalkMachine{cpuMachine: &cpuMachine{be: be, P: P, off: offsets, g: patch.Graph, edgeBase: patch.EdgeBase},
		idOff: id, lo: int64(patch.Lo), hi: int64(patch.Hi), n: patch.Graph.NumRows, length: length}
}

func (m *cpuWalkMachine) RouteOrigins(hdr, sendIDs, pos, F, nFB, _ backend.Buffer, fcap int64, hop, fanout, hops int) error {
	return m.routeBy(m.idOff, hdr, sendIDs, pos, F, nFB, fcap, 0, hop, fanout, hops)
}

// InitWalks is wk_init.
func (m *cpuWalkMachine) InitWalks(out, starts backend.Buffer, n int64, L int) error {
	o, s := i32s(out), int64(L+1)
	if int64(len(o)) < n*s || int64(len(i32s(starts))) < n {
		return m.bad("initWalks: %d slots for %d walks of %d", len(o), n, s)
	}
	for i := range n * s {
		o[i] = -1
		if i%s == 0 {
			o[i] = i32s(starts)[i/s]
		}
	}
	return nil
}

// Pack is wk_pack.
func (m *cpuWalkMachine) Pack(dst, src, pos backend.Buffer, n int64, w int) error {
	W, d, s := int64(w), i64s(dst), i64s(src)
	if int64(len(d)) < n*W || int64(len(i32s(pos))) < n {
		return m.bad("pack: %d words for %d records of %d", len(d), n, w)
	}
	for j := range n {
		p := int64(i32s(pos)[j])
		copy(d[j*W:(j+1)*W], s[p*W:(p+1)*W])
	}
	return nil
}

// Step is wk_step.
func (m *cpuWalkMachine) Step(t int, recv backend.Buffer, R int64, rec, F, trO, trR, bad backend.Buffer) error {
	in := i64s(recv)
	if int64(len(in)) < walkWords*R || int64(len(i64s(trR))) < traceWords*R {
		return m.bad("step: %d words for %d walkers", len(in), R)
	}
	for j := range R {
		origin, idx, key, v := in[4*j], in[4*j+1], in[4*j+2], in[4*j+3]
		i32s(F)[j], i32s(trO)[j] = -1, -1
		if origin < 0 || origin >= int64(m.P) || idx < 0 || v < m.lo || v >= m.hi {
			i64s(bad)[0]++
			continue
		}
		a, d := m.g.Indptr[v], m.g.Indptr[v+1]-m.g.Indptr[v]
		if d == 0 {
			continue
		}
		u := m.g.Indices[a+int64(rng.Below(rng.Hash(uint64(key), uint64(t)), uint64(d)))]
		i32s(trO)[j] = int32(origin)
		copy(i64s(trR)[traceWords*j:], []int64{idx, int64(t + 1), int64(u)})
		if t+1 < m.length {
			i32s(F)[j] = u
			copy(i64s(rec)[walkWords*j:], []int64{origin, idx, key, int64(u)})
		}
	}
	return nil
}

func (m *cpuWalkMachine) Concat(dst backend.Buffer, srcs []backend.Buffer, n []int64) error {
	at := 0
	for i, s := range srcs {
		if s.DType() != dst.DType() || at+int(n[i]) > dst.Len() {
			return m.bad("concat of %d %v at %d into %d %v", n[i], s.DType(), at, dst.Len(), dst.DType())
		}
		if s.DType() == backend.Int32 {
			at += copy(i32s(dst)[at:], i32s(s)[:n[i]])
		} else {
			at += copy(i64s(dst)[at:], i64s(s)[:n[i]])
		}
	}
	return nil
}

// Scatter is wk_scatter.
func (m *cpuWalkMachine) Scatter(out, recv backend.Buffer, k, n int64, L int, bad backend.Buffer) error {
	r := i64s(recv)
	for j := range k {
		idx, t, u := r[3*j], r[3*j+1], r[3*j+2]
		if idx < 0 || idx >= n || t < 1 || t > int64(L) || u < 0 || u >= m.n {
			i64s(bad)[0]++
			continue
		}
		i32s(out)[idx*int64(L+1)+t] = int32(u)
	}
	return nil
}
