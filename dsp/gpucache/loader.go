package gpucache

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/tensor/backend"
)

// ErrInput is wrapped by errors about bad arguments or input nodes.
var ErrInput = errors.New("gpucache: invalid input")

// ErrPeer is wrapped when another device reported bad input.
var ErrPeer = errors.New("gpucache: a peer device failed")

// Store gathers feature rows on one device: the rows the device caches
// from device memory, any other row from the host tier.
type Store interface {
	// Gather writes the rows of nodes (int32 device buffer) into dst
	// (float32, nodes.Len() x Cols), queued on the device.
	Gather(dst, nodes backend.Buffer) error
	// HotRows is the number of rows cached in device memory; DeviceBytes
	// the device memory the store holds.
	HotRows() int
	DeviceBytes() int64
	Close() error
}

// Config configures a Loader.
type Config struct {
	Plan       *cache.Plan
	Rank       int
	Rows, Cols int // the feature table's shape
	Backend    backend.Backend
	Store      Store
	// Dev carries the ID and row all-to-alls, Host the headers. Both are
	// needed when the plan makes devices serve each other (Exchanges);
	// they must be this device's handles of one group each.
	Dev  comm.DeviceComm
	Host comm.Comm
	// Metrics receives the feature bytes and cache counts (nil: none).
	Metrics *metrics.Counters
}

// Exchanges reports whether devices serve each other rows under plan:
// more than one device shares a copy and something is cached. It is the
// same on every device.
func Exchanges(plan *cache.Plan) bool {
	return plan != nil && plan.GroupSize() > 1 && plan.CachedNodes() > 0
}

// Loader loads batches' feature rows on one device. Load is a collective
// when Exchanges(plan): every device calls it once per batch, in the same
// order. Not safe for concurrent use.
type Loader struct {
	cfg      Config
	router   *Router
	exchange bool
	x        exchange.Exchanger
}

// New checks cfg and returns a loader.
func New(cfg Config) (*Loader, error) {
	switch {
	case cfg.Plan == nil || cfg.Backend == nil || cfg.Store == nil:
		return nil, fmt.Errorf("%w: nil plan, back end or store", ErrInput)
	case cfg.Cols != cfg.Plan.Cols() || cfg.Rows < 0:
		return nil, fmt.Errorf("%w: table %d x %d for a plan of width %d", ErrInput, cfg.Rows, cfg.Cols, cfg.Plan.Cols())
	}
	r, err := NewRouter(cfg.Plan, cfg.Rank, cfg.Rows)
	if err != nil {
		return nil, err
	}
	l := &Loader{cfg: cfg, router: r, exchange: Exchanges(cfg.Plan)}
	if l.exchange {
		k := cfg.Plan.Devices()
		if cfg.Dev == nil || cfg.Host == nil || cfg.Dev.Size() != k || cfg.Host.Size() != k || cfg.Dev.Rank() != cfg.Rank || cfg.Host.Rank() != cfg.Rank {
			return nil, fmt.Errorf("%w: the exchange needs device and host communicators of %d ranks with this rank %d", ErrInput, k, cfg.Rank)
		}
		l.x = exchange.Exchanger{C: cfg.Host, M: cfg.Metrics, Purpose: metrics.Feature}
	}
	return l, nil
}

// Exchanges reports whether loads exchange rows with peers.
func (l *Loader) Exchanges() bool { return l.exchange }

// Error reports a failed load.
type Error struct {
	Rank int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("gpucache: rank %d: load: %s: %v", e.Rank, e.Msg, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

func (l *Loader) fail(msg string, err error) error {
	return &Error{Rank: l.cfg.Rank, Msg: msg, Err: err}
}

// Load returns a new float32 device buffer with the rows of the nodes
// ids (host IDs, as the sampler copied them out), len(ids) x Cols, in
// ids' order. The caller frees it.
func (l *Loader) Load(ctx context.Context, ids []int32) (backend.Buffer, error) {
	if !l.exchange {
		return l.loadLocal(ids)
	}
	rt, rerr := l.router.Route(ids)
	return l.loadExchange(ctx, rt, rerr, len(ids))
}

// loadLocal gathers every row on this device.
func (l *Loader) loadLocal(ids []int32) (backend.Buffer, error) {
	hits, cold, err := l.router.Count(ids)
	if err != nil {
		return nil, l.fail("routing", err)
	}
	b := l.cfg.Backend
	nb, err := devbuf.Upload(b, ids)
	if err != nil {
		return nil, l.fail("uploading the IDs", err)
	}
	defer b.Free(nb)
	x, err := b.Alloc(backend.Float32, len(ids)*l.cfg.Cols)
	if err != nil {
		return nil, l.fail("feature rows", err)
	}
	if err := l.cfg.Store.Gather(x, nb); err != nil {
		b.Free(x)
		return nil, l.fail("gathering rows", err)
	}
	l.count(&Route{Hits: hits, Cold: cold}, len(ids))
	return x, nil
}

func (l *Loader) count(rt *Route, n int) {
	m := l.cfg.Metrics
	if m == nil {
		return
	}
	row := int64(l.cfg.Cols) * 4
	m.AddCache(int64(n), int64(rt.Hits), int64(n-rt.Hits-rt.Cold))
	m.AddBytes(metrics.Feature, metrics.Local, int64(rt.Hits)*row)
	m.AddBytes(metrics.Feature, metrics.Host, int64(rt.Cold)*row)
}

// loadExchange runs the collective part of a load. With rerr != nil (bad
// input here) it only takes part in the header exchange, which tells the
// peers to fail too.
func (l *Loader) loadExchange(ctx context.Context, rt *Route, rerr error, n int) (backend.Buffer, error) {
	k, rank, cols := l.cfg.Plan.Devices(), l.cfg.Rank, l.cfg.Cols
	hdr := make([]int64, 2*k)
	for p := range k {
		if rerr != nil {
			hdr[2*p] = 1
		} else {
			hdr[2*p+1] = int64(rt.SendCounts[p])
		}
	}
	got, err := l.x.Fixed(ctx, hdr, 2)
	if err != nil {
		return nil, l.fail("request counts", err)
	}
	if rerr != nil {
		return nil, l.fail("routing", rerr)
	}
	recv := make([]int, k)
	var failed []int
	for p := range k {
		if got[2*p] != 0 {
			failed = append(failed, p)
		}
		c := got[2*p+1]
		if c < 0 || c > int64(l.cfg.Rows) || (p == rank && c != 0) {
			return nil, l.fail(fmt.Sprintf("rank %d asks for %d rows", p, c), ErrInput)
		}
		recv[p] = int(c)
	}
	if failed != nil {
		return nil, l.fail(fmt.Sprintf("ranks %v reported bad input", failed), ErrPeer)
	}
	nRecv := 0
	for _, c := range recv {
		nRecv += c
	}
	a, s := len(rt.Local), len(rt.Send)
	if len(rt.Perm) != n {
		return nil, l.fail("routing", fmt.Errorf("%w: %d routed positions for %d nodes", ErrInput, len(rt.Perm), n))
	}
	b := l.cfg.Backend
	var bufs []backend.Buffer
	defer func() {
		for _, x := range bufs {
			b.Free(x)
		}
	}()
	alloc := func(dt backend.DType, n int) (backend.Buffer, error) {
		x, err := b.Alloc(dt, n)
		if err == nil {
			bufs = append(bufs, x)
		}
		return x, err
	}
	view := func(x backend.Buffer, off, n int) backend.Buffer {
		v, verr := devbuf.View(x, off, n)
		if verr != nil && err == nil {
			err = verr
		}
		return v
	}
	// One upload for the local IDs, the requests and the permutation.
	idx := make([]int32, 0, a+s+n)
	idx = append(append(append(idx, rt.Local...), rt.Send...), rt.Perm...)
	ib, err := devbuf.Upload(b, idx)
	if err != nil {
		return nil, l.fail("uploading the route", err)
	}
	bufs = append(bufs, ib)
	local, send, perm := view(ib, 0, a), view(ib, a, s), view(ib, a+s, n)
	stage, aerr := alloc(backend.Float32, (a+s)*cols)
	asked, berr := alloc(backend.Int32, nRecv)
	served, cerr := alloc(backend.Float32, nRecv*cols)
	if err := errors.Join(aerr, berr, cerr, err); err != nil {
		return nil, l.fail("staging buffers", err)
	}
	stageLocal, stagePeer := view(stage, 0, a*cols), view(stage, a*cols, s*cols)
	if err != nil {
		return nil, l.fail("staging buffers", err)
	}
	if err := l.cfg.Store.Gather(stageLocal, local); err != nil {
		return nil, l.fail("gathering local rows", err)
	}
	if err := l.cfg.Dev.AllToAllV(ctx, asked, recv, send, rt.SendCounts); err != nil {
		return nil, l.fail("sending the requests", err)
	}
	if err := l.cfg.Store.Gather(served, asked); err != nil {
		return nil, l.fail("gathering the asked rows", err)
	}
	if err := l.cfg.Dev.AllToAllV(ctx, stagePeer, scale(rt.SendCounts, cols), served, scale(recv, cols)); err != nil {
		return nil, l.fail("sending the rows", err)
	}
	x, err := b.Alloc(backend.Float32, n*cols)
	if err != nil {
		return nil, l.fail("feature rows", err)
	}
	if n > 0 {
		if err := b.GatherRows(x, stage, perm, a+s, cols); err != nil {
			b.Free(x)
			return nil, l.fail("ordering rows", err)
		}
	}
	l.count(rt, n)
	if m := l.cfg.Metrics; m != nil {
		var ids, rows int64
		for p := range k {
			ids += int64(rt.SendCounts[p])
			rows += int64(recv[p])
		}
		m.AddBytes(metrics.Feature, metrics.Peer, 4*ids+4*int64(cols)*rows)
	}
	return x, nil
}

func scale(counts []int, f int) []int {
	out := make([]int, len(counts))
	for i, c := range counts {
		out[i] = c * f
	}
	return out
}

// Close closes the store.
func (l *Loader) Close() error { return l.cfg.Store.Close() }

// HostStore is a Store for back ends whose buffers the host can read (the
// CPU back end, and any back end through Download/Upload): rows come from
// the host table. Its cache is notional (HotRows counts the plan's rows
// for this device); it serves tests and CPU runs.
type HostStore struct {
	B          backend.Backend
	Table      []float32 // rows x Cols, shared, not copied
	Rows, Cols int
	Hot        int
}

// Gather copies the rows of nodes from the table.
func (s *HostStore) Gather(dst, nodes backend.Buffer) error {
	n := nodes.Len()
	if dst.Len() != n*s.Cols {
		return fmt.Errorf("%w: gather of %d rows x %d into %d values", ErrInput, n, s.Cols, dst.Len())
	}
	if n == 0 {
		return nil
	}
	ids := make([]int32, n)
	if err := s.B.Download(ids, nodes); err != nil {
		return err
	}
	out := make([]float32, n*s.Cols)
	for i, v := range ids {
		if v < 0 || int(v) >= s.Rows {
			return fmt.Errorf("%w: node %d not in [0, %d)", ErrInput, v, s.Rows)
		}
		copy(out[i*s.Cols:(i+1)*s.Cols], s.Table[int(v)*s.Cols:(int(v)+1)*s.Cols])
	}
	return s.B.Upload(dst, out)
}

func (s *HostStore) HotRows() int       { return s.Hot }
func (s *HostStore) DeviceBytes() int64 { return 4 * int64(s.Hot) * int64(s.Cols) }
func (s *HostStore) Close() error       { return nil }
