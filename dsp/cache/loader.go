package cache

import (
	"context"
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Loader fetches feature rows for one device. Load is a collective when
// any device caches rows (all devices call it together, once per batch);
// a Loader is not safe for concurrent use.
type Loader struct {
	x    exchange.Exchanger
	b    backend.Backend
	plan *Plan
	rank int
	host []float32 // the whole table, rows x cols: the cold tier
	rows int
	cols int
	hot  backend.Buffer // this device's cached rows, plan.Rows(rank) order
	nHot int
	m    *metrics.Counters
	pos  []int32 // dedup scratch: node -> position in the unique list, -1
}

// Error reports a failed load.
type Error struct {
	Rank int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("cache: rank %d: load: %s: %v", e.Rank, e.Msg, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// ErrPeer is wrapped when another device reported invalid input.
var ErrPeer = fmt.Errorf("cache: a peer device failed")

// NewLoader uploads device c.Rank()'s cached rows (plan.Rows) from host,
// the rows x cols feature table, into b's memory. host is shared, not
// copied, and must not change while the loader is in use.
func NewLoader(c comm.Comm, b backend.Backend, plan *Plan, host []float32, rows, cols int, m *metrics.Counters) (*Loader, error) {
	if c == nil || b == nil || plan == nil {
		return nil, inputErr("nil communicator, back end or plan")
	}
	if c.Size() != plan.Devices() {
		return nil, inputErr("communicator of %d ranks, plan for %d devices", c.Size(), plan.Devices())
	}
	if cols != plan.Cols() || rows < 0 || int64(len(host)) != int64(rows)*int64(cols) || rows != len(plan.member) {
		return nil, inputErr("table of %d values is not %d x %d for a plan of %d nodes x %d", len(host), rows, cols, len(plan.member), plan.Cols())
	}
	l := &Loader{x: exchange.Exchanger{C: c, M: m, Purpose: metrics.Feature}, b: b, plan: plan, rank: c.Rank(),
		host: host, rows: rows, cols: cols, m: m, pos: make([]int32, rows)}
	for i := range l.pos {
		l.pos[i] = -1
	}
	mine := plan.Rows(l.rank)
	if l.nHot = len(mine); l.nHot > 0 {
		data := make([]float32, 0, l.nHot*cols)
		for _, v := range mine {
			data = append(data, host[int(v)*cols:(int(v)+1)*cols]...)
		}
		buf, err := b.Alloc(backend.Float32, len(data))
		if err != nil {
			return nil, fmt.Errorf("cache: rank %d: device cache of %d rows: %w", l.rank, l.nHot, err)
		}
		if err := b.Upload(buf, data); err != nil {
			b.Free(buf)
			return nil, fmt.Errorf("cache: rank %d: device cache: %w", l.rank, err)
		}
		l.hot = buf
	}
	return l, nil
}

// CachedRows is the number of rows this device holds.
func (l *Loader) CachedRows() int { return l.nHot }

// DeviceBytes is the device memory the cached rows take.
func (l *Loader) DeviceBytes() int64 { return 4 * int64(l.nHot) * int64(l.cols) }

// Close frees the device cache.
func (l *Loader) Close() {
	if l.hot != nil {
		l.b.Free(l.hot)
		l.hot = nil
	}
}

// collective reports whether loads exchange data (some device caches rows).
func (l *Loader) collective() bool { return l.plan.k > 1 && l.plan.CachedNodes() > 0 }

// Load returns the feature rows of nodes (len(nodes) x cols, row-major,
// in nodes' order; repeats allowed), together with the other devices.
func (l *Loader) Load(ctx context.Context, nodes []graph.NodeID) ([]float32, error) {
	bad := ""
	for i, v := range nodes {
		if v < 0 || int(v) >= l.rows {
			bad = fmt.Sprintf("nodes[%d] = %d not in [0, %d)", i, v, l.rows)
			break
		}
	}
	// Dedupe: uniq lists each node once, inv maps positions to it.
	var uniq []graph.NodeID
	var inv []int32
	if bad == "" {
		inv = make([]int32, len(nodes))
		for i, v := range nodes {
			p := l.pos[v]
			if p < 0 {
				p = int32(len(uniq))
				l.pos[v] = p
				uniq = append(uniq, v)
			}
			inv[i] = p
		}
		for _, v := range uniq {
			l.pos[v] = -1
		}
	}
	// Where every unique node is: this device, a peer, or host memory.
	k := l.plan.k
	reqCounts := make([]int, k)
	var cold, local []int32 // positions in uniq
	var localSlots []int32
	holders := make([]int32, len(uniq))
	slots := make([]int32, len(uniq))
	for i, v := range uniq {
		dev, slot := l.plan.Holder(l.rank, v)
		holders[i], slots[i] = int32(dev), slot
		switch {
		case dev < 0:
			cold = append(cold, int32(i))
		case dev == l.rank:
			local = append(local, int32(i))
			localSlots = append(localSlots, slot)
		default:
			reqCounts[dev]++
		}
	}
	out := make([]float32, len(uniq)*l.cols)
	// Cold rows from host memory, in parallel with the hot exchange.
	coldDone := make(chan struct{})
	go func() {
		defer close(coldDone)
		for _, i := range cold {
			v := int(uniq[i])
			copy(out[int(i)*l.cols:(int(i)+1)*l.cols], l.host[v*l.cols:(v+1)*l.cols])
		}
	}()
	err := l.loadHot(ctx, bad, uniq, holders, slots, reqCounts, local, localSlots, out)
	<-coldDone
	if err != nil {
		return nil, err
	}
	if bad != "" {
		return nil, &Error{Rank: l.rank, Msg: bad, Err: ErrInput}
	}
	l.m.AddBytes(metrics.Feature, metrics.Host, int64(len(cold)*l.cols*4))
	l.m.AddCache(int64(len(uniq)), int64(len(local)), int64(len(uniq)-len(local)-len(cold)))
	res := make([]float32, len(nodes)*l.cols)
	for i, p := range inv {
		copy(res[i*l.cols:(i+1)*l.cols], out[int(p)*l.cols:(int(p)+1)*l.cols])
	}
	return res, nil
}

// loadHot fetches this device's own cached rows and, by all-to-all, the
// rows peers cache. With bad != "" it only takes part in the first
// exchange, reporting the failure.
func (l *Loader) loadHot(ctx context.Context, bad string, uniq []graph.NodeID, holders, slots []int32, reqCounts []int, local, localSlots []int32, out []float32) error {
	if len(local) > 0 {
		rows, err := l.gather(localSlots)
		if err != nil {
			return err
		}
		for j, i := range local {
			copy(out[int(i)*l.cols:(int(i)+1)*l.cols], rows[j*l.cols:(j+1)*l.cols])
		}
		l.m.AddBytes(metrics.Feature, metrics.Local, int64(len(rows)*4))
	}
	if !l.collective() {
		return nil
	}
	k := l.plan.k
	status := int64(0)
	if bad != "" {
		status = 1
	}
	hdr := make([]int64, 2*k)
	for p := range k {
		hdr[2*p], hdr[2*p+1] = status, int64(reqCounts[p])
	}
	recvHdr, err := l.x.Fixed(ctx, hdr, 2)
	if err != nil {
		return &Error{Rank: l.rank, Msg: "request sizes", Err: err}
	}
	if bad != "" {
		return nil
	}
	serveCounts := make([]int, k)
	var failed []int
	for p := range k {
		if recvHdr[2*p] != 0 {
			failed = append(failed, p)
		}
		c := recvHdr[2*p+1]
		if c < 0 || c > int64(l.nHot) {
			return &Error{Rank: l.rank, Msg: fmt.Sprintf("rank %d requests %d rows", p, c), Err: ErrInput}
		}
		serveCounts[p] = int(c)
	}
	if failed != nil {
		return &Error{Rank: l.rank, Msg: fmt.Sprintf("ranks %v reported invalid input", failed), Err: ErrPeer}
	}
	// Requests: the slots wanted from each holder.
	off := exchange.Offsets(reqCounts)
	next := append([]int(nil), off[:k]...)
	req := make([]int32, off[k])
	where := make([]int32, off[k]) // position in uniq of each request
	for i, h := range holders {
		if h >= 0 && int(h) != l.rank {
			req[next[h]], where[next[h]] = slots[i], int32(i)
			next[h]++
		}
	}
	asked, err := l.x.I32(ctx, req, reqCounts, serveCounts)
	if err != nil {
		return &Error{Rank: l.rank, Msg: "requests", Err: err}
	}
	for _, s := range asked {
		if s < 0 || int(s) >= l.nHot {
			return &Error{Rank: l.rank, Msg: fmt.Sprintf("a peer asked for cache slot %d of %d", s, l.nHot), Err: ErrInput}
		}
	}
	var served []float32
	if len(asked) > 0 {
		if served, err = l.gather(asked); err != nil {
			return err
		}
	}
	got, err := l.x.F32(ctx, served, exchange.Scale(serveCounts, l.cols), exchange.Scale(reqCounts, l.cols))
	if err != nil {
		return &Error{Rank: l.rank, Msg: "rows", Err: err}
	}
	for j, i := range where {
		copy(out[int(i)*l.cols:(int(i)+1)*l.cols], got[j*l.cols:(j+1)*l.cols])
	}
	return nil
}

// gather reads cached rows (by slot) from device memory into host memory.
func (l *Loader) gather(slots []int32) ([]float32, error) {
	b := l.b
	idx, err := b.Alloc(backend.Int32, len(slots))
	if err != nil {
		return nil, &Error{Rank: l.rank, Msg: "gather index", Err: err}
	}
	defer b.Free(idx)
	if err := b.Upload(idx, slots); err != nil {
		return nil, &Error{Rank: l.rank, Msg: "gather index", Err: err}
	}
	dst, err := b.Alloc(backend.Float32, len(slots)*l.cols)
	if err != nil {
		return nil, &Error{Rank: l.rank, Msg: "gather rows", Err: err}
	}
	defer b.Free(dst)
	if err := b.GatherRows(dst, l.hot, idx, l.nHot, l.cols); err != nil {
		return nil, &Error{Rank: l.rank, Msg: "gather rows", Err: err}
	}
	rows := make([]float32, len(slots)*l.cols)
	if err := b.Download(rows, dst); err != nil {
		return nil, &Error{Rank: l.rank, Msg: "gather rows", Err: err}
	}
	return rows, nil
}
