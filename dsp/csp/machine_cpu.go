package csp

import (
	"errors"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// cpuMachine is the machine of the CPU back end: every kernel of csp.cu
// and every gpusample hop step in Go, over the back end's buffers (host
// slices; a view shares its buffer's memory). Work runs when it is
// queued, so it is done when a method returns. The owners' draws are
// sample.NeighborSampler's over the patch, the relabeling
// sample.ToBlock's, so a batch equals the CPU sampler's by construction:
// it is the reference the CUDA kernels are checked against.
type cpuMachine struct {
	be       *cpu.Backend
	P        int
	off      []int64                 // partition offsets (P+1)
	g        *graph.CSR              // the patch
	owner    *sample.NeighborSampler // over the patch: node-wise draws (nil for the other protocols)
	fan      []int                   // node-wise fanouts
	edgeBase int64
}

// newCPUSamplerMachine is the node-wise machine of patch on host: its
// draws are a sample.NeighborSampler's over the patch.
func newCPUSamplerMachine(host *cpu.Backend, patch *layout.Patch, offsets []int64, P int, cfg Config) (SamplerMachine, error) {
	owner, err := sample.NewNeighborSampler(patch.Graph, sample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted})
	if err != nil {
		return nil, err
	}
	return &cpuMachine{be: host, P: P, off: offsets, g: owner.Graph(), owner: owner, fan: cfg.Fanouts, edgeBase: patch.EdgeBase}, nil
}

// Sample is the owner's batch: the patch is the whole graph.
func (m *cpuMachine) Sample(seeds []graph.NodeID, key sample.Key) (*Batch, error) {
	mb, err := m.owner.Sample(seeds, key)
	if err != nil {
		return nil, err
	}
	return &Batch{Host: mb}, nil
}

// Sibling is the same machine on another CPU back end (sharing the
// owner's sampler, which is safe for concurrent use).
func (m *cpuMachine) Sibling(dev backend.Backend) (SamplerMachine, error) {
	host, ok := dev.(*cpu.Backend)
	if !ok || host == nil {
		return nil, m.bad("a sibling of a CPU machine on %T", dev)
	}
	t := *m
	t.be = host
	return &t, nil
}

// errContract marks a call that breaks a machine method's contract
// (sizes, types): a bug in the protocol, reported instead of a panic.
var errContract = errors.New("csp: machine contract broken")

func (m *cpuMachine) bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errContract, fmt.Sprintf(format, args...))
}

// i32s and i64s are the host slices behind CPU back-end buffers.
func i32s(b backend.Buffer) []int32 { return cpu.I32(b) }
func i64s(b backend.Buffer) []int64 { return cpu.I64(b) }

func (m *cpuMachine) Alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	if dt != backend.Int32 && dt != backend.Int64 {
		return nil, m.bad("alloc of %v", dt)
	}
	return m.be.Alloc(dt, int(max(n, 1)))
}

func (m *cpuMachine) Free(b backend.Buffer) { m.be.Free(b) }

func (m *cpuMachine) View(b backend.Buffer, off, n int64) backend.Buffer {
	if b.DType() == backend.Int32 {
		return cpu.WrapI32(i32s(b)[off : off+n : off+n])
	}
	return cpu.WrapI64(i64s(b)[off : off+n : off+n])
}

func (m *cpuMachine) Upload(dst backend.Buffer, src any) error {
	switch s := src.(type) {
	case []int32:
		d := i32s(dst)
		if dst.DType() != backend.Int32 || len(s) > len(d) {
			return m.bad("upload of %d int32 into %d %v", len(s), dst.Len(), dst.DType())
		}
		copy(d, s)
	case []int64:
		d := i64s(dst)
		if dst.DType() != backend.Int64 || len(s) > len(d) {
			return m.bad("upload of %d int64 into %d %v", len(s), dst.Len(), dst.DType())
		}
		copy(d, s)
	default:
		return m.bad("upload of %T", src)
	}
	return nil
}

func (m *cpuMachine) Read(dst []int64, srcs []backend.Buffer, n []int64) error {
	at := 0
	for i, b := range srcs {
		h := i64s(b)
		if b.DType() != backend.Int64 || int64(len(h)) < n[i] || at+int(n[i]) > len(dst) {
			return m.bad("read of %d words from %d %v into %d", n[i], b.Len(), b.DType(), len(dst)-at)
		}
		at += copy(dst[at:], h[:n[i]])
	}
	if at != len(dst) {
		return m.bad("read %d words into %d", at, len(dst))
	}
	return nil
}

func (m *cpuMachine) Route(hdr, sendIDs, pos, F, nFB, _ backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	return m.routeBy(m.off, hdr, sendIDs, pos, F, nFB, fcap, key, hop, fanout, hops)
}

// routeBy is csp_route_count and csp_route_scatter over the offsets off:
// a stable counting sort of the frontier by owner (the GPU's order inside
// an owner's range is arbitrary), and the header rows.
func (m *cpuMachine) routeBy(off []int64, hdr, sendIDs, pos, F, nFB backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	P := m.P
	nF := i64s(nFB)[0]
	f, ids, ps, h := i32s(F), i32s(sendIDs), i32s(pos), i64s(hdr)
	if nF < 0 || nF > fcap || int64(len(f)) < nF || int64(len(ids)) < nF || int64(len(ps)) < nF || len(h) < P*HeaderWords {
		return m.bad("route: nF %d, fcap %d, F %d, sendIDs %d, pos %d", nF, fcap, len(f), len(ids), len(ps))
	}
	cnt := make([]int64, P+1) // per owner; P: outside the graph (counted, not routed)
	for _, v := range f[:nF] {
		cnt[ownerOf(off, int64(v))]++
	}
	at := make([]int64, P)
	for p := 1; p < P; p++ {
		at[p] = at[p-1] + cnt[p-1]
	}
	for i, v := range f[:nF] {
		if o := ownerOf(off, int64(v)); o < P {
			ids[at[o]], ps[at[o]] = v, int32(i)
			at[o]++
		}
	}
	for p := range P {
		row := h[p*HeaderWords : (p+1)*HeaderWords]
		row[hStatus], row[hCount], row[hKey], row[hHop] = stOK, cnt[p], int64(key), int64(hop)
		row[hFanout], row[hHops], row[hNF], row[hBad] = int64(fanout), int64(hops), nF, cnt[P]
	}
	return nil
}

// draws samples the received nodes of each requester segment under its
// hop key with the owner's CPU sampler.
func (m *cpuMachine) draws(h int, ids []int32, seg []int64, keys []uint64) ([]*sample.Neighbors, error) {
	out := make([]*sample.Neighbors, len(keys))
	for s, hk := range keys {
		nb, err := m.owner.SampleHopKey(ids[seg[s]:seg[s+1]], h, hk)
		if err != nil {
			return nil, err
		}
		out[s] = nb
	}
	return out, nil
}

// DrawStrided is gs_sample_stride: node i's draws in slots [i*k, i*k+m)
// of ans and ansE, -1 in the rest.
func (m *cpuMachine) DrawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error {
	k := int64(m.fan[h])
	a, ae := i32s(ans), i64s(ansE)
	if k <= 0 || len(seg) != len(keys)+1 || seg[len(keys)] != R || int64(len(i32s(ids))) < R || int64(len(a)) < R*k || int64(len(ae)) < R*k {
		return m.bad("drawStrided: k %d, R %d, seg %v, ans %d", k, R, seg, len(a))
	}
	nbs, err := m.draws(h, i32s(ids)[:R], seg, keys)
	if err != nil {
		return err
	}
	for s, nb := range nbs {
		for i := range seg[s+1] - seg[s] {
			lo, hi := nb.Indptr[i], nb.Indptr[i+1]
			if hi-lo > k {
				return m.bad("node %d drew %d > %d", i32s(ids)[seg[s]+i], hi-lo, k)
			}
			p0 := (seg[s] + i) * k
			for j := range k {
				if lo+j < hi {
					a[p0+j], ae[p0+j] = nb.Nodes[lo+j], nb.EdgeIDs[lo+j]+m.edgeBase
				} else {
					a[p0+j], ae[p0+j] = -1, -1
				}
			}
		}
	}
	return nil
}

// UnpackStrided is csp_stride_counts, the scan and csp_stride_compact.
func (m *cpuMachine) UnpackStrided(ptr, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error {
	K := int64(k)
	a, p, pt := i32s(ans), i32s(pos), i64s(ptr)
	if int64(len(a)) < nF*K || int64(len(p)) < nF || int64(len(pt)) < nF+1 {
		return m.bad("unpackStrided: %d answers, %d positions, %d row offsets for %d nodes at fanout %d", len(a), len(p), len(pt), nF, k)
	}
	cnt := make([]int64, nF+1)
	for j := range nF {
		c := int64(0)
		for c < K && a[j*K+c] >= 0 {
			c++
		}
		cnt[p[j]] = c
	}
	exclusiveScan(pt, cnt)
	if int64(len(i32s(src))) < pt[nF] || int64(len(i64s(eid))) < pt[nF] {
		return m.bad("unpackStrided: %d edges into %d", pt[nF], src.Len())
	}
	for s := range nF * K {
		if a[s] < 0 {
			continue
		}
		j, t := s/K, s%K
		d := pt[p[j]] + t
		i32s(src)[d] = a[s]
		i64s(eid)[d] = -1
		if ansE != nil {
			i64s(eid)[d] = i64s(ansE)[s]
		}
	}
	return nil
}

// CountExact is CountHop (fanout -1: every neighbor) and csp_totals.
func (m *cpuMachine) CountExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error) {
	if m.fan[h] >= 0 || len(roff) != m.P+1 || roff[m.P] != R {
		return nil, nil, m.bad("countExact at fanout %d, roff %v, R %d", m.fan[h], roff, R)
	}
	if qptr, err = m.Alloc(backend.Int64, R+1); err != nil {
		return nil, nil, err
	}
	if tot, err = m.Alloc(backend.Int64, int64(m.P+1)); err != nil {
		m.Free(qptr)
		return nil, nil, err
	}
	qp, t := i64s(qptr), i64s(tot)
	for i, v := range i32s(ids)[:R] {
		qp[i+1] = qp[i] + m.g.Indptr[v+1] - m.g.Indptr[v]
	}
	for p := range m.P {
		t[p] = qp[roff[p+1]] - qp[roff[p]]
	}
	t[m.P] = qp[R]
	return qptr, tot, nil
}

// DrawExact is DrawHop, csp_pack and csp_add_i64.
func (m *cpuMachine) DrawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error {
	nbs, err := m.draws(h, i32s(ids)[:R], roff, keys)
	if err != nil {
		return err
	}
	qp, pk, ei := i64s(qptr), i32s(packed), i64s(eid)
	if qp[R] != E || int64(len(pk)) < R+E || int64(len(ei)) < E {
		return m.bad("drawExact: qptr says %d edges, E %d, packed %d", qp[R], E, len(pk))
	}
	var at int64
	src := make([]int32, 0, E)
	for _, nb := range nbs {
		if at+int64(len(nb.Nodes)) > E {
			return m.bad("drawExact: more than %d edges drawn", E)
		}
		src = append(src, nb.Nodes...)
		for _, e := range nb.EdgeIDs {
			ei[at] = e + m.edgeBase
			at++
		}
	}
	if at != E {
		return m.bad("drawExact: %d edges drawn, E %d", at, E)
	}
	P := int64(m.P)
	for i := range R {
		p := edgeRow(roff, P, i)
		s0 := roff[p]
		base := s0 + qp[s0]
		lo, hi := qp[i], qp[i+1]
		pk[base+(i-s0)] = int32(hi - lo)
		out := base + roff[p+1] - s0 + lo - qp[s0]
		copy(pk[out:out+hi-lo], src[lo:hi])
	}
	return nil
}

// UnpackExact is csp_unpack_counts, the two scans and csp_unpack_src.
func (m *cpuMachine) UnpackExact(ptr, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error {
	P := int64(m.P)
	rp, order, pt := i32s(ans), i32s(pos), i64s(ptr)
	if len(bptr) != m.P+1 || bptr[P] != nF || len(S) != m.P || int64(len(pt)) < nF+1 {
		return m.bad("unpackExact: bptr %v, S %v for %d nodes", bptr, S, nF)
	}
	cnt, cntS := make([]int64, nF+1), make([]int64, nF+1)
	for j := range nF {
		c := int64(rp[S[edgeRow(bptr, P, j)]+j])
		cntS[j], cnt[order[j]] = c, c
	}
	sptr := make([]int64, nF+1)
	exclusiveScan(sptr, cntS)
	exclusiveScan(pt, cnt)
	if pt[nF] != E {
		return m.bad("unpackExact: %d edges, E %d", pt[nF], E)
	}
	for j := range nF {
		q := edgeRow(bptr, P, j)
		a, n := sptr[j], sptr[j+1]-sptr[j]
		in, d := bptr[q+1]+a, pt[order[j]]
		copy(i32s(src)[d:d+n], rp[in:in+n])
		if ansE != nil {
			copy(i64s(eid)[d:d+n], i64s(ansE)[a:a+n])
		} else {
			for t := range n {
				i64s(eid)[d+t] = -1
			}
		}
	}
	return nil
}

// Relabel is gpusample's Relabel: sample.ToBlock's first-seen order.
func (m *cpuMachine) Relabel(F backend.Buffer, nF int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	pt := i64s(ptr)[:nF+1]
	E := pt[nF]
	if E < 0 || E > e || int64(len(i32s(src))) < e {
		return nil, nil, nil, m.bad("relabel: %d edges, bound %d", E, e)
	}
	var blk sample.Block
	if nF == 0 {
		// No destinations but edges: a typed relabel of a node type
		// reached only as other types' neighbors (ptr is then {E}, not
		// a CSR ToBlock takes).
		blk = firstSeen(i32s(src)[:E])
	} else if blk, err = sample.ToBlock(i32s(F)[:nF], &sample.Neighbors{Indptr: pt, Nodes: slices.Clone(i32s(src)[:E])}); err != nil {
		return nil, nil, nil, err
	}
	var bufs [3]backend.Buffer
	for i, c := range []struct {
		dt backend.DType
		n  int64
	}{{backend.Int32, nF + e}, {backend.Int32, e}, {backend.Int64, 3}} {
		if bufs[i], err = m.Alloc(c.dt, c.n); err != nil {
			for _, b := range bufs[:i] {
				m.Free(b)
			}
			return nil, nil, nil, err
		}
	}
	copy(i32s(bufs[0]), blk.SrcNodes)
	copy(i32s(bufs[1]), blk.Indices)
	copy(i64s(bufs[2]), []int64{nF, E, int64(len(blk.SrcNodes))})
	return bufs[0], bufs[1], bufs[2], nil
}

// firstSeen is ToBlock's relabeling without destinations: the distinct
// nodes of src in first-seen order, and each entry's position there.
func firstSeen(src []int32) sample.Block {
	pos := make(map[int32]int32, len(src))
	blk := sample.Block{Indices: make([]int32, len(src))}
	for e, v := range src {
		l, ok := pos[v]
		if !ok {
			l = int32(len(blk.SrcNodes))
			pos[v] = l
			blk.SrcNodes = append(blk.SrcNodes, v)
		}
		blk.Indices[e] = l
	}
	return blk
}

// Batch hands the parts over as a host MiniBatch: the blocks are the
// parts' buffers (no copy).
func (m *cpuMachine) Batch(outs []HopOut, seeds []graph.NodeID) (*Batch, error) {
	L := len(outs)
	mb := &sample.MiniBatch{Seeds: slices.Clone(seeds), Blocks: make([]sample.Block, L)}
	for h := range outs {
		o := &outs[h]
		nd, ns, e := o.NumDst, o.NumSrc, o.NumEdges
		mb.Blocks[L-1-h] = sample.Block{NumDst: int(nd), SrcNodes: i32s(o.SrcNodes)[:ns:ns], Indptr: i64s(o.Indptr)[: nd+1 : nd+1],
			Indices: i32s(o.Indices)[:e:e], EdgeIDs: i64s(o.EdgeIDs)[:e:e]}
		m.Free(o.Sizes)
		*o = HopOut{}
	}
	return &Batch{Host: mb}, nil
}

func (m *cpuMachine) Shrink(b backend.Buffer, n int64) (backend.Buffer, error) {
	if n < 0 || n > int64(b.Len()) {
		return nil, m.bad("shrink of %d elements to %d", b.Len(), n)
	}
	return m.View(b, 0, n), nil
}

func (m *cpuMachine) Close() error { return nil }

// exclusiveScan writes the exclusive prefix sums of x into out.
func exclusiveScan(out, x []int64) {
	var s int64
	for i, v := range x {
		out[i] = s
		s += v
	}
}

// edgeRow is common.cuh's edge_row: the row r of ptr (rows rows) with
// ptr[r] <= e < ptr[r+1].
func edgeRow(ptr []int64, rows, e int64) int64 {
	lo, hi := int64(0), rows
	for hi-lo > 1 {
		mid := (lo + hi) >> 1
		if ptr[mid] <= e {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
