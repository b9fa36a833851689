package gpucsp

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// ---- A host mirror of gpuMachine: every kernel of csp.cu and every
// gpusample hop step in Go (the owner's draws by sample.NeighborSampler
// on its patch), so that proto, the protocol itself, runs in CI.

// hbuf is a host buffer; views share the slice and the liveness flag.
type hbuf struct {
	dt    backend.DType
	i32   []int32
	i64   []int64
	alive *bool
	view  bool
}

func (b *hbuf) Len() int {
	if b.dt == backend.Int32 {
		return len(b.i32)
	}
	return len(b.i64)
}
func (b *hbuf) DType() backend.DType { return b.dt }

// hostMachine is one rank's mirror machine.
type hostMachine struct {
	rank, P  int
	off      []int64
	owner    *sample.NeighborSampler // over the rank's patch
	edgeBase int64
	fan      []int
	keyOf    map[uint64]sample.Key // hop key -> the batch key it came from
	shuffle  *rng.Stream           // orders nodes inside an owner range

	mu     sync.Mutex
	misuse []string // use after free, double free, wrong types
	live   int      // buffers allocated and not freed
	reads  int
	// failAt makes the named operation fail on its n-th call (1-based).
	failAt map[string]int
	calls  map[string]int
}

func (m *hostMachine) bad(format string, args ...any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	m.misuse = append(m.misuse, msg)
	return fmt.Errorf("host machine: %s", msg)
}

// enter counts a call of op, fails it where asked, and checks buffers.
func (m *hostMachine) enter(op string, bufs ...backend.Buffer) error {
	m.mu.Lock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[op]++
	n := m.calls[op]
	m.mu.Unlock()
	if m.failAt != nil && m.failAt[op] == n {
		return fmt.Errorf("injected failure of %s (call %d)", op, n)
	}
	for i, b := range bufs {
		if b == nil {
			continue
		}
		h, ok := b.(*hbuf)
		if !ok {
			return m.bad("%s: argument %d is a %T", op, i, b)
		}
		if !*h.alive {
			return m.bad("%s: argument %d used after free", op, i)
		}
	}
	return nil
}

func (m *hostMachine) alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	if err := m.enter("alloc"); err != nil {
		return nil, err
	}
	if n < 0 || n > maxEntries {
		return nil, m.bad("alloc of %d", n)
	}
	alive := true
	b := &hbuf{dt: dt, alive: &alive}
	switch dt {
	case backend.Int32:
		b.i32 = make([]int32, max(n, 1))
		for i := range b.i32 {
			b.i32[i] = -7 // uninitialized memory is not zero
		}
	case backend.Int64:
		b.i64 = make([]int64, max(n, 1))
		for i := range b.i64 {
			b.i64[i] = -7
		}
	default:
		return nil, m.bad("alloc of %v", dt)
	}
	m.mu.Lock()
	m.live++
	m.mu.Unlock()
	return b, nil
}

func (m *hostMachine) free(b backend.Buffer) {
	h, ok := b.(*hbuf)
	if !ok || h.view || !*h.alive {
		m.bad("free of %T (view %v)", b, ok && h.view)
		return
	}
	*h.alive = false
	m.mu.Lock()
	m.live--
	m.mu.Unlock()
}

func (m *hostMachine) view(b backend.Buffer, off, n int64) backend.Buffer {
	h := b.(*hbuf)
	v := &hbuf{dt: h.dt, alive: h.alive, view: true}
	if h.dt == backend.Int32 {
		v.i32 = h.i32[off : off+n]
	} else {
		v.i64 = h.i64[off : off+n]
	}
	return v
}

func (m *hostMachine) upload(dst backend.Buffer, src any) error {
	if err := m.enter("upload", dst); err != nil {
		return err
	}
	d := dst.(*hbuf)
	switch s := src.(type) {
	case []int32:
		if d.dt != backend.Int32 || len(s) > len(d.i32) {
			return m.bad("upload of %d int32 into %d %v", len(s), d.Len(), d.dt)
		}
		copy(d.i32, s)
	case []int64:
		if d.dt != backend.Int64 || len(s) > len(d.i64) {
			return m.bad("upload of %d int64 into %d %v", len(s), d.Len(), d.dt)
		}
		copy(d.i64, s)
	default:
		return m.bad("upload of %T", src)
	}
	return nil
}

func (m *hostMachine) read(dst []int64, srcs []backend.Buffer, n []int64) error {
	if err := m.enter("read", srcs...); err != nil {
		return err
	}
	m.reads++
	at := 0
	for i, b := range srcs {
		h := b.(*hbuf)
		if h.dt != backend.Int64 || int64(len(h.i64)) < n[i] {
			return m.bad("read of %d words from %d %v", n[i], h.Len(), h.dt)
		}
		at += copy(dst[at:], h.i64[:n[i]])
	}
	if at != len(dst) {
		return m.bad("read %d words into %d", at, len(dst))
	}
	return nil
}

func i32s(b backend.Buffer) []int32 { return b.(*hbuf).i32 }
func i64s(b backend.Buffer) []int64 { return b.(*hbuf).i64 }

// route mirrors csp_route_count and csp_route_scatter; nodes inside an
// owner's range are shuffled (the GPU's order there is arbitrary too).
func (m *hostMachine) route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	if err := m.enter("route", hdr, sendIDs, pos, F, nFB, ctr); err != nil {
		return err
	}
	nF := i64s(nFB)[0]
	if nF < 0 || nF > fcap || int64(len(i32s(F))) < max(fcap, 1) || int64(len(i32s(sendIDs))) < fcap {
		return m.bad("route: nF %d, fcap %d, F %d, sendIDs %d", nF, fcap, len(i32s(F)), len(i32s(sendIDs)))
	}
	P := m.P
	groups := make([][]int32, P+1)
	for i, v := range i32s(F)[:nF] {
		o := ownerOf(m.off, int64(v))
		groups[o] = append(groups[o], int32(i))
	}
	at := 0
	for o, g := range groups {
		for i := len(g) - 1; i > 0; i-- {
			j := int(m.shuffle.Below(uint64(i + 1)))
			g[i], g[j] = g[j], g[i]
		}
		if o == P {
			break // outside the graph: counted in the header, not routed
		}
		for _, i := range g {
			i32s(sendIDs)[at], i32s(pos)[at] = i32s(F)[i], i
			at++
		}
	}
	h := i64s(hdr)
	for p := range P {
		row := h[p*hWords : (p+1)*hWords]
		row[hStatus], row[hCount], row[hKey], row[hHop] = 0, int64(len(groups[p])), int64(key), int64(hop)
		row[hFanout], row[hHops], row[hNF], row[hBad] = int64(fanout), int64(hops), nF, int64(len(groups[P]))
	}
	return nil
}

// draws samples the received nodes of each requester segment under its
// key with the owner's CPU sampler.
func (m *hostMachine) draws(h int, ids []int32, seg []int64, keys []uint64) ([]*sample.Neighbors, error) {
	out := make([]*sample.Neighbors, len(keys))
	for s, hk := range keys {
		key, ok := m.keyOf[hk]
		if !ok {
			return nil, m.bad("hop key %#x of segment %d unknown", hk, s)
		}
		if sample.HopKey(key, h) != hk {
			return nil, m.bad("hop key %#x is not hop %d's", hk, h)
		}
		nb, err := m.owner.SampleHop(ids[seg[s]:seg[s+1]], h, key)
		if err != nil {
			return nil, err
		}
		out[s] = nb
	}
	return out, nil
}

// drawStrided mirrors gs_sample_stride.
func (m *hostMachine) drawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error {
	if err := m.enter("drawStrided", ids, ans, ansE); err != nil {
		return err
	}
	k := int64(m.fan[h])
	if k <= 0 || len(seg) != len(keys)+1 || seg[len(keys)] != R || int64(len(i32s(ans))) < R*k || int64(len(i64s(ansE))) < R*k {
		return m.bad("drawStrided: k %d, R %d, seg %v, ans %d", k, R, seg, len(i32s(ans)))
	}
	nbs, err := m.draws(h, i32s(ids)[:R], seg, keys)
	if err != nil {
		return err
	}
	for s, nb := range nbs {
		for i := range seg[s+1] - seg[s] {
			a, b := nb.Indptr[i], nb.Indptr[i+1]
			if b-a > k {
				return m.bad("node %d drew %d > %d", i32s(ids)[seg[s]+i], b-a, k)
			}
			p0 := (seg[s] + i) * k
			for j := range k {
				if a+j < b {
					i32s(ans)[p0+j], i64s(ansE)[p0+j] = nb.Nodes[a+j], nb.EdgeIDs[a+j]+m.edgeBase
				} else {
					i32s(ans)[p0+j], i64s(ansE)[p0+j] = -1, -1
				}
			}
		}
	}
	return nil
}

// unpackStrided mirrors csp_stride_counts, the scan and csp_stride_compact.
func (m *hostMachine) unpackStrided(ptr, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error {
	if err := m.enter("unpackStrided", ptr, src, eid, ans, ansE, pos); err != nil {
		return err
	}
	K := int64(k)
	a, p := i32s(ans), i32s(pos)
	cnt := make([]int64, nF+1)
	for j := range nF {
		c := int64(0)
		for c < K && a[j*K+c] >= 0 {
			c++
		}
		cnt[p[j]] = c
	}
	pt := i64s(ptr)
	copy(pt, exclusiveScan(cnt))
	for s := range nF * K {
		if a[s] < 0 {
			continue
		}
		j, t := s/K, s%K
		d := pt[p[j]] + t
		i32s(src)[d] = a[s]
		if ansE != nil {
			i64s(eid)[d] = i64s(ansE)[s]
		} else {
			i64s(eid)[d] = -1
		}
	}
	return nil
}

// countExact mirrors CountHop (fanout -1: every neighbor) and csp_totals.
func (m *hostMachine) countExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error) {
	if err := m.enter("countExact", ids); err != nil {
		return nil, nil, err
	}
	if m.fan[h] >= 0 {
		return nil, nil, m.bad("countExact at fanout %d", m.fan[h])
	}
	q, err := m.alloc(backend.Int64, R+1)
	if err != nil {
		return nil, nil, err
	}
	t, err := m.alloc(backend.Int64, int64(m.P+1))
	if err != nil {
		m.free(q)
		return nil, nil, err
	}
	g := m.owner.Graph()
	qp := i64s(q)
	qp[0] = 0
	for i, v := range i32s(ids)[:R] {
		qp[i+1] = qp[i] + g.Indptr[v+1] - g.Indptr[v]
	}
	for p := range m.P {
		i64s(t)[p] = qp[roff[p+1]] - qp[roff[p]]
	}
	i64s(t)[m.P] = qp[roff[m.P]]
	return q, t, nil
}

// drawExact mirrors DrawHop, csp_pack and csp_add_i64.
func (m *hostMachine) drawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error {
	if err := m.enter("drawExact", ids, qptr, packed, eid); err != nil {
		return err
	}
	nbs, err := m.draws(h, i32s(ids)[:R], roff, keys)
	if err != nil {
		return err
	}
	var src []int32
	var eids []int64
	for _, nb := range nbs {
		src = append(src, nb.Nodes...)
		for _, e := range nb.EdgeIDs {
			eids = append(eids, e+m.edgeBase)
		}
	}
	qp := i64s(qptr)
	if int64(len(src)) != E || qp[R] != E {
		return m.bad("drawExact: %d drawn, qptr says %d, E %d", len(src), qp[R], E)
	}
	copy(i64s(eid), eids)
	pk := i32s(packed)
	for i := range R {
		p := edgeRow(roff, int64(m.P), i)
		s0 := roff[p]
		base := s0 + qp[s0]
		np := roff[p+1] - s0
		a, b := qp[i], qp[i+1]
		pk[base+(i-s0)] = int32(b - a)
		out := base + np + (a - qp[s0])
		copy(pk[out:out+b-a], src[a:b])
	}
	return nil
}

// unpackExact mirrors csp_unpack_counts, the two scans and csp_unpack_src.
func (m *hostMachine) unpackExact(ptr, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error {
	if err := m.enter("unpackExact", ptr, src, eid, ans, ansE, pos); err != nil {
		return err
	}
	P := int64(m.P)
	rp, order := i32s(ans), i32s(pos)
	cnt, cntS := make([]int64, nF+1), make([]int64, nF+1)
	for j := range nF {
		q := edgeRow(bptr, P, j)
		c := int64(rp[S[q]+j])
		cntS[j], cnt[order[j]] = c, c
	}
	pt, sptr := i64s(ptr), exclusiveScan(cntS)
	copy(pt, exclusiveScan(cnt))
	if pt[nF] != E {
		return m.bad("unpackExact: %d edges, E %d", pt[nF], E)
	}
	for j := range nF {
		q := edgeRow(bptr, P, j)
		a, n := sptr[j], sptr[j+1]-sptr[j]
		in := bptr[q+1] + a
		d := pt[order[j]]
		for t := range n {
			i32s(src)[d+t] = rp[in+t]
			if ansE != nil {
				i64s(eid)[d+t] = i64s(ansE)[a+t]
			} else {
				i64s(eid)[d+t] = -1
			}
		}
	}
	return nil
}

// relabel mirrors gpusample's Relabel with sample.ToBlock (the same
// first-seen order).
func (m *hostMachine) relabel(F backend.Buffer, nF int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	if err := m.enter("relabel", F, src, ptr); err != nil {
		return nil, nil, nil, err
	}
	pt := i64s(ptr)[:nF+1]
	E := pt[nF]
	if E > e || int64(len(i32s(src))) < e {
		return nil, nil, nil, m.bad("relabel: %d edges, bound %d", E, e)
	}
	blk, err := sample.ToBlock(slices.Clone(i32s(F)[:nF]), &sample.Neighbors{Indptr: slices.Clone(pt), Nodes: slices.Clone(i32s(src)[:E])})
	if err != nil {
		return nil, nil, nil, err
	}
	var bufs [3]backend.Buffer
	for i, c := range []struct {
		dt backend.DType
		n  int64
	}{{backend.Int32, nF + e}, {backend.Int32, e}, {backend.Int64, 3}} {
		if bufs[i], err = m.alloc(c.dt, c.n); err != nil {
			for _, b := range bufs[:i] {
				m.free(b)
			}
			return nil, nil, nil, err
		}
	}
	copy(i32s(bufs[0]), blk.SrcNodes)
	copy(i32s(bufs[1]), blk.Indices)
	copy(i64s(bufs[2]), []int64{nF, E, int64(len(blk.SrcNodes))})
	return bufs[0], bufs[1], bufs[2], nil
}

// ---- Collectives among goroutines: every call meets the same call of
// the other ranks; counts are checked against each other.

type hostGroup struct {
	P   int
	mu  sync.Mutex
	cur *meeting
}

type meeting struct {
	posts []post
	n     int
	done  chan struct{}
}

type post struct {
	op         string
	dst, src   *hbuf
	send, recv []int
}

func newHostGroup(P int) *hostGroup {
	return &hostGroup{P: P, cur: &meeting{posts: make([]post, P), done: make(chan struct{})}}
}

// meet posts this rank's call and waits for every rank's (or ctx).
func (g *hostGroup) meet(ctx context.Context, rank int, p post) ([]post, error) {
	g.mu.Lock()
	m := g.cur
	m.posts[rank] = p
	m.n++
	if m.n == g.P {
		g.cur = &meeting{posts: make([]post, g.P), done: make(chan struct{})}
		close(m.done)
	}
	g.mu.Unlock()
	select {
	case <-m.done:
		return m.posts, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("rank %d waiting in %s: %w", rank, p.op, ctx.Err())
	}
}

// hostComm is rank's exchanger in a hostGroup.
type hostComm struct {
	g    *hostGroup
	rank int
}

func (c hostComm) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	n := src.Len() / c.g.P
	return c.run(ctx, "AllToAll", dst, fill(c.g.P, n), src, fill(c.g.P, n))
}

func (c hostComm) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
	return c.run(ctx, "AllToAllV", dst, recvCounts, src, sendCounts)
}

func (c hostComm) run(ctx context.Context, op string, dst backend.Buffer, recv []int, src backend.Buffer, send []int) error {
	d, s := dst.(*hbuf), src.(*hbuf)
	if !*d.alive || !*s.alive || d.dt != s.dt || sum(recv) != int64(d.Len()) || sum(send) != int64(s.Len()) {
		return fmt.Errorf("rank %d %s: bad buffers (recv %v into %d, send %v from %d)", c.rank, op, recv, d.Len(), send, s.Len())
	}
	posts, err := c.g.meet(ctx, c.rank, post{op: op, dst: d, src: s, send: send, recv: recv})
	if err != nil {
		return err
	}
	// Receive every peer's block for this rank, after checking that the
	// calls match.
	at := 0
	for q, pq := range posts {
		if pq.op != op || pq.src.dt != d.dt || pq.send[c.rank] != recv[q] {
			return fmt.Errorf("%w: rank %d %s expects %d from rank %d, which sends %d in %s", ErrProtocol, c.rank, op, recv[q], q, pq.send[c.rank], pq.op)
		}
		from := 0
		for r := range c.rank {
			from += pq.send[r]
		}
		n := recv[q]
		if d.dt == backend.Int32 {
			copy(d.i32[at:at+n], pq.src.i32[from:from+n])
		} else {
			copy(d.i64[at:at+n], pq.src.i64[from:from+n])
		}
		at += n
	}
	// Nobody leaves before every rank has copied (sources stay intact).
	_, err = c.g.meet(ctx, c.rank, post{op: op + " done", send: fill(c.g.P, 0)})
	return err
}

func sum(x []int) int64 {
	var s int64
	for _, v := range x {
		s += int64(v)
	}
	return s
}
