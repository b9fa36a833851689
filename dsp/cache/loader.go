package cache

import (
	"context"
	"errors"
	"fmt"
	"github.com/strata-gnn/strata/graph"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// ErrPeer is wrapped when another device reported bad input.
var ErrPeer = errors.New("cache: a peer device failed")

// Store gathers feature rows on one device: the rows the device caches
// from device memory, any other row from the host tier.
type Store interface {
	// Gather writes the rows of nodes (int32 device buffer) into dst
	// (float32, nodes.Len() x Cols; bfloat16 too for a BF16Gatherer),
	// queued on the device.
	Gather(dst, nodes backend.Buffer) error
	// GatherDropout is Gather followed by input dropout in the same
	// pass: element k of dst (flat index) is kept iff
	// rng.DropUniform(seed, k) >= p and then scaled by 1/(1-p) (float32),
	// backend.Dropout's rule, so dst is what Gather and then
	// Dropout(dst, mask, dst, p, seed) leave. p is in [0, 1); 0 is Gather.
	GatherDropout(dst, nodes backend.Buffer, p float32, seed uint64) error
	// HotRows is the number of rows cached in device memory; DeviceBytes
	// the device memory the store holds.
	HotRows() int
	DeviceBytes() int64
	Close() error
}

// NodeOrderTabler is implemented by stores that may hold the whole table
// on their device as it is: NodeOrderTable returns it (float32, Rows x
// Cols, row v is node v, the values the store was built from) and true
// only when every row is cached, in node order, at full precision (not
// bfloat16) and the store is not a shard of the nodes. The store owns the
// buffer (Close frees it); whole-graph inference reads layer 1's input
// from it (infer.Options.Inputs) instead of uploading the table again.
type NodeOrderTabler interface {
	NodeOrderTable() (backend.Buffer, bool)
}

// CachedTabler is implemented by stores that hold their cached rows in
// one buffer of their device: CachedTable returns it (float32, HotRows
// x Cols, row i the values of the i-th node the store caches: the
// plan's Rows for its rank, in that order) and true only at full
// precision (not bfloat16), for a store that is not a shard of the nodes
// and caches some rows but not all (a store of every row keeps node
// order: NodeOrderTable). The store owns the buffer. When every row is
// cached by one device or another (a partitioned cache of enough
// budget), whole-graph inference reads layer 1's input from these
// buffers by its exchange (infer.Options.InputShards), with no
// replicated table and no host gather.
type CachedTabler interface {
	CachedTable() (backend.Buffer, bool)
}

// BF16Gatherer is implemented by stores whose Gather and GatherDropout
// may also write into a bfloat16 dst: each value as the float32 gather
// (and dropout) computes it, rounded to nearest even on store, so dst
// holds what the float32 gather followed by backend.Convert holds, bit
// for bit (exactly the table's values when the table is bfloat16 and p
// is 0). GathersBF16 reports whether this store does (a GPU store of a
// bfloat16 table; HostStore always).
type BF16Gatherer interface {
	GathersBF16() bool
}

// gathersBF16 reports whether s writes bfloat16 rows (BF16Gatherer).
func gathersBF16(s Store) bool {
	g, ok := s.(BF16Gatherer)
	return ok && g.GathersBF16()
}

// LoaderConfig configures a Loader.
type LoaderConfig struct {
	Plan       *Plan
	Rank       int
	Rows, Cols int // the feature table's shape
	Backend    backend.Backend
	Store      Store
	// Dev carries the ID and row all-to-alls, Host the headers. Both are
	// needed when the plan makes devices serve each other (Exchanges);
	// they must be this device's handles of one group each.
	Dev  comm.Comm
	Host comm.Comm
	// Metrics receives the feature bytes and cache counts (nil: none).
	Metrics *metrics.Counters
	// BFloat16Rows asks for loads that return bfloat16 rows (a trainer
	// with bfloat16 activations: its input then needs no conversion).
	// Granted when the store writes them (BF16Gatherer), else loads
	// return float32 rows; Loader.RowType says which. The rows are the
	// float32 load's rounded to nearest even (backend.Convert's), bit
	// for bit; peers still exchange float32 rows.
	BFloat16Rows bool
}

// Exchanges reports whether devices serve each other rows under plan:
// more than one device shares a copy and something is cached. It is the
// same on every device.
func Exchanges(plan *Plan) bool {
	return plan != nil && plan.GroupSize() > 1 && plan.CachedNodes() > 0
}

// Loader loads batches' feature rows on one device. Load is a collective
// when Exchanges(plan): every device calls it once per batch, in the same
// order. Not safe for concurrent use.
type Loader struct {
	cfg      LoaderConfig
	mach     Machine
	exchange bool
	rowType  backend.DType // of the rows loads return
}

// NewLoader checks cfg and returns a loader. On a CUDA back end the
// routing runs on the GPU (the holder table goes to device memory: the
// registered device machine); on any other back end its host mirror
// runs.
func NewLoader(cfg LoaderConfig) (*Loader, error) {
	switch {
	case cfg.Plan == nil || cfg.Backend == nil || cfg.Store == nil:
		return nil, fmt.Errorf("%w: nil plan, back end or store", ErrInput)
	case cfg.Cols != cfg.Plan.Cols() || cfg.Rows < 0:
		return nil, fmt.Errorf("%w: table %d x %d for a plan of width %d", ErrInput, cfg.Rows, cfg.Cols, cfg.Plan.Cols())
	}
	holder, err := holderTable(cfg.Plan, cfg.Rank, cfg.Rows)
	if err != nil {
		return nil, err
	}
	l := &Loader{cfg: cfg, exchange: Exchanges(cfg.Plan), rowType: backend.Float32}
	if cfg.BFloat16Rows && gathersBF16(cfg.Store) {
		l.rowType = backend.BFloat16
	}
	k := cfg.Plan.Devices()
	if l.exchange {
		if cfg.Dev == nil || cfg.Host == nil || cfg.Dev.Size() != k || cfg.Host.Size() != k || cfg.Dev.Rank() != cfg.Rank || cfg.Host.Rank() != cfg.Rank {
			return nil, fmt.Errorf("%w: the exchange needs device and host communicators of %d ranks with this rank %d", ErrInput, k, cfg.Rank)
		}
	}
	if l.mach, err = newMachine(cfg.Backend, holder, k, cfg.Rank, cfg.Rows); err != nil {
		return nil, err
	}
	return l, nil
}

// maxHolderDevices bounds the devices of a plan (the holder table
// stores a device per node in a byte).
const maxHolderDevices = 127

// holderTable is a byte per node of rows: the device that serves the
// node's row to rank (a peer, rank itself for its cached rows), or -1
// for a cold row, read from host memory. A byte per node keeps the
// lookups of a batch's random IDs in cache.
func holderTable(plan *Plan, rank, rows int) ([]int8, error) {
	switch {
	case rank < 0 || rank >= plan.Devices() || rows < 0:
		return nil, fmt.Errorf("%w: rank %d of %d devices, %d rows", ErrInput, rank, plan.Devices(), rows)
	case int64(rows) != plan.TableBytes()/8:
		return nil, fmt.Errorf("%w: %d rows for a plan over %d nodes", ErrInput, rows, plan.TableBytes()/8)
	case plan.Devices() > maxHolderDevices:
		return nil, fmt.Errorf("%w: %d devices, at most %d", ErrInput, plan.Devices(), maxHolderDevices)
	}
	h := make([]int8, rows)
	parallelRows(rows, func(lo, hi int) {
		for v := lo; v < hi; v++ {
			d, _ := plan.Holder(rank, graph.NodeID(v))
			h[v] = int8(max(d, -1))
		}
	})
	return h, nil
}

// Exchanges reports whether loads exchange rows with peers.
func (l *Loader) Exchanges() bool { return l.exchange }

// RowType is the dtype of the rows loads return: backend.BFloat16 when
// LoaderConfig.BFloat16Rows was granted, else backend.Float32.
func (l *Loader) RowType() backend.DType { return l.rowType }

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

func (l *Loader) fail(msg string, err error) error {
	return &Error{Rank: l.cfg.Rank, Msg: msg, Err: err}
}

// Load returns a new device buffer (of RowType) with the rows of the
// nodes ids (host IDs), len(ids) x Cols, in ids' order. The caller frees it.
// It uploads the IDs and runs LoadDevice.
func (l *Loader) Load(ctx context.Context, ids []int32) (backend.Buffer, error) {
	return l.LoadDropout(ctx, ids, Dropout{})
}

// Dropout is the input dropout a load applies to the rows it returns:
// element k of the batch's rows (flat index, row-major) is kept iff
// rng.DropUniform(Seed, k) >= P and then scaled by 1/(1-P) in float32
// (backend.Dropout's rule), in the pass that writes the rows. P == 0 is
// none; P must be in [0, 1).
type Dropout struct {
	P    float32
	Seed uint64
}

// LoadDropout is Load with the input dropout drop applied to the rows.
func (l *Loader) LoadDropout(ctx context.Context, ids []int32, drop Dropout) (backend.Buffer, error) {
	nb, err := devbuf.Upload(l.cfg.Backend, ids)
	if err != nil {
		if l.exchange {
			// Still take part in the collective, failing every device.
			return l.loadExchange(ctx, nil, 0, drop, l.fail("uploading the IDs", err))
		}
		return nil, l.fail("uploading the IDs", err)
	}
	defer l.cfg.Backend.Free(nb)
	return l.LoadDeviceDropout(ctx, nb, drop)
}

// LoadDevice is Load for IDs already in an int32 buffer of the loader's
// back end (on a GPU: a buffer of the loader's handle). The IDs are
// checked on the device: an ID outside [0, Rows) fails the load (and,
// when loads exchange rows, every device's load).
func (l *Loader) LoadDevice(ctx context.Context, ids backend.Buffer) (backend.Buffer, error) {
	return l.LoadDeviceDropout(ctx, ids, Dropout{})
}

// LoadDeviceDropout is LoadDevice with the input dropout drop applied to
// the rows while they are written (the local gather, or the scatter of
// the exchanged rows to their batch positions): no separate pass. A rate
// outside [0, 1) fails the load (and every device's, when loads exchange
// rows).
func (l *Loader) LoadDeviceDropout(ctx context.Context, ids backend.Buffer, drop Dropout) (backend.Buffer, error) {
	var bad error
	n := 0
	if ids == nil || ids.DType() != backend.Int32 {
		bad = l.fail("input nodes", fmt.Errorf("%w: the IDs must be an int32 buffer", ErrInput))
	} else {
		n = ids.Len()
	}
	if err := backend.CheckDropoutRate("cache.Load", drop.P); err != nil && bad == nil {
		bad = l.fail("input dropout", fmt.Errorf("%w: %v", ErrInput, err))
	}
	if l.exchange {
		return l.loadExchange(ctx, ids, n, drop, bad)
	}
	if bad != nil {
		return nil, bad
	}
	return l.loadLocal(ids, n, drop)
}

// checkCounts turns the route's counts into an error for bad IDs.
func (l *Loader) checkCounts(cnt []int64, n int) error {
	k := l.cfg.Plan.Devices()
	var sum int64
	for p := range k {
		if cnt[p] < 0 {
			return fmt.Errorf("%w: negative count %d", ErrInput, cnt[p])
		}
		sum += cnt[p]
	}
	if b := cnt[binBad(k)]; b != 0 || sum != int64(n) {
		return fmt.Errorf("%w: %d of %d input nodes not in [0, %d)", ErrInput, b, n, l.cfg.Rows)
	}
	return nil
}

// loadLocal gathers every row on this device: the counts and the gather
// are queued, then one wait.
func (l *Loader) loadLocal(ids backend.Buffer, n int, drop Dropout) (backend.Buffer, error) {
	b := l.cfg.Backend
	if err := l.mach.Route(ids, n, nil, nil); err != nil {
		return nil, l.fail("routing", err)
	}
	x, err := devbuf.AllocRaw(b, l.rowType, n*l.cfg.Cols) // the gather writes every row
	if err != nil {
		return nil, l.fail("feature rows", err)
	}
	cnt, err := l.mach.Counts()
	if err == nil {
		err = l.checkCounts(cnt, n)
	}
	if err != nil {
		b.Free(x)
		return nil, l.fail("routing", err)
	}
	if err := l.cfg.Store.GatherDropout(x, ids, drop.P, drop.Seed); err != nil {
		b.Free(x)
		return nil, l.fail("gathering rows", err)
	}
	k := l.cfg.Plan.Devices()
	l.count(int(cnt[l.cfg.Rank]-cnt[binCold(k)]), int(cnt[binCold(k)]), n)
	return x, nil
}

func (l *Loader) count(hits, cold, n int) {
	m := l.cfg.Metrics
	if m == nil {
		return
	}
	row := int64(l.cfg.Cols) * l.cfg.Plan.ValueBytes() // read from the store
	m.AddCache(int64(n), int64(hits), int64(n-hits-cold))
	m.AddBytes(metrics.Feature, metrics.Local, int64(hits)*row)
	m.AddBytes(metrics.Feature, metrics.Host, int64(cold)*row)
}

// loadExchange runs the collective part of a load:
//
//  1. the IDs are grouped by serving device on the device (own rows
//     first, then each peer's), and the counts read back (one wait);
//  2. the own rows (cached and cold) are gathered into the staging
//     buffer, and a header all-to-all on the host communicator carries
//     the status and request counts;
//  3. the IDs go to the holders (all-to-all-v), the holders gather the
//     rows by their slot tables, the rows come back (all-to-all-v) into
//     the staging buffer after the own rows;
//  4. one kernel scatters the staging rows to their batch positions,
//     applying drop (the flat index is the batch position's).
//
// With bad != nil (bad input here) it only takes part in the header
// exchange, which tells the peers to fail too.
func (l *Loader) loadExchange(ctx context.Context, ids backend.Buffer, n int, drop Dropout, bad error) (backend.Buffer, error) {
	k, rank, cols := l.cfg.Plan.Devices(), l.cfg.Rank, l.cfg.Cols
	b := l.cfg.Backend
	var bufs []backend.Buffer
	defer func() {
		for _, x := range bufs {
			b.Free(x)
		}
	}()
	// Every staging buffer is written completely before it is read
	// (the route, the gathers and the all-to-alls): no zero fill.
	alloc := func(dt backend.DType, n int) (backend.Buffer, error) {
		x, err := devbuf.AllocRaw(b, dt, n)
		if err == nil {
			bufs = append(bufs, x)
		}
		return x, err
	}
	var verr error
	view := func(x backend.Buffer, off, n int) backend.Buffer {
		v, err := devbuf.View(x, off, n)
		if err != nil && verr == nil {
			verr = err
		}
		return v
	}
	var grouped, pos, stage backend.Buffer
	var cnt []int64
	a := 0
	if bad == nil {
		var e1, e2, e3 error
		grouped, e1 = alloc(backend.Int32, n)
		pos, e2 = alloc(backend.Int32, n)
		stage, e3 = alloc(backend.Float32, n*cols)
		if err := errors.Join(e1, e2, e3); err != nil {
			bad = l.fail("staging buffers", err)
		}
	}
	if bad == nil {
		err := l.mach.Route(ids, n, grouped, pos)
		if err == nil {
			cnt, err = l.mach.Counts()
		}
		if err == nil {
			err = l.checkCounts(cnt, n)
		}
		if err != nil {
			bad = l.fail("routing", err)
		}
	}
	if bad == nil {
		// The own rows, queued before the header exchange.
		a = int(cnt[rank])
		if err := l.cfg.Store.Gather(view(stage, 0, a*cols), view(grouped, 0, a)); err != nil || verr != nil {
			bad = l.fail("gathering local rows", errors.Join(err, verr))
		}
	}
	hdr := make([]int64, 2*k)
	sendCounts := make([]int, k)
	for p := range k {
		if bad != nil {
			hdr[2*p] = 1
		} else if p != rank {
			hdr[2*p+1] = cnt[p]
			sendCounts[p] = int(cnt[p])
		}
	}
	got, err := l.header(ctx, hdr)
	if err != nil {
		return nil, l.fail("request counts", err)
	}
	if bad != nil {
		return nil, bad
	}
	recv := make([]int, k)
	var failed []int
	nRecv := 0
	for p := range k {
		if got[2*p] != 0 {
			failed = append(failed, p)
		}
		c := got[2*p+1]
		if c < 0 || c > int64(l.cfg.Rows) || (p == rank && c != 0) {
			return nil, l.fail(fmt.Sprintf("rank %d asks for %d rows", p, c), ErrInput)
		}
		recv[p] = int(c)
		nRecv += int(c)
	}
	if failed != nil {
		return nil, l.fail(fmt.Sprintf("ranks %v reported bad input", failed), ErrPeer)
	}
	s := n - a
	asked, aerr := alloc(backend.Int32, nRecv)
	served, serr := alloc(backend.Float32, nRecv*cols)
	if err := errors.Join(aerr, serr); err != nil {
		return nil, l.fail("staging buffers", err)
	}
	send, stagePeer := view(grouped, a, s), view(stage, a*cols, s*cols)
	if verr != nil {
		return nil, l.fail("staging buffers", verr)
	}
	if err := l.cfg.Dev.AllToAllV(ctx, asked, recv, send, sendCounts); err != nil {
		return nil, l.fail("sending the requests", err)
	}
	if err := l.cfg.Store.Gather(served, asked); err != nil {
		return nil, l.fail("gathering the asked rows", err)
	}
	if err := l.cfg.Dev.AllToAllV(ctx, stagePeer, scale(sendCounts, cols), served, scale(recv, cols)); err != nil {
		return nil, l.fail("sending the rows", err)
	}
	// The scatter writes every row (no bad IDs), rounding them to
	// bfloat16 for bfloat16 rows.
	x, err := devbuf.AllocRaw(b, l.rowType, n*cols)
	if err != nil {
		return nil, l.fail("feature rows", err)
	}
	if err := l.mach.Scatter(x, stage, pos, n, cols, drop.P, drop.Seed); err != nil {
		b.Free(x)
		return nil, l.fail("ordering rows", err)
	}
	cold := int(cnt[binCold(k)])
	l.count(a-cold, cold, n)
	if m := l.cfg.Metrics; m != nil {
		m.AddBytes(metrics.Feature, metrics.Peer, 4*int64(s)+4*int64(cols)*int64(nRecv))
	}
	return x, nil
}

// Close releases the routing tables and closes the store.
func (l *Loader) Close() error {
	var err error
	if l.mach != nil {
		err = l.mach.Close()
		l.mach = nil
	}
	return errors.Join(err, l.cfg.Store.Close())
}

// HostStore is a Store for back ends whose buffers the host can read (the
// CPU back end, and any back end through Download/Upload): rows come from
// the host table. Its cache is notional (HotRows counts the plan's rows
// for this device); it serves tests and CPU runs.
type HostStore struct {
	B          backend.Backend
	Table      []float32 // rows x Cols, shared, not copied
	Rows, Cols int
	Hot        int
	// Source, when set, replaces Table: the rows of a machine's shard
	// and, asked of their machines, everyone else's (package
	// dsp/machines). One call per Gather: a batch's rows at once.
	Source RowSource
	// Order, when set, lists the Hot nodes the store notionally caches,
	// in cache order (the plan's Rows): CachedTable copies their rows.
	Order []graph.NodeID
	// OnlyHot: the store is asked only for Order's rows (its peers cache
	// every other row), as a GPU store with no host table
	// (feature.Options.NoHost) requires; a gather of any other row fails,
	// so CPU devices check what such GPUs rely on.
	OnlyHot bool

	cachedOnce sync.Once
	cached     []float32
	hotOnce    sync.Once
	hotSet     []bool // OnlyHot: whether node v is in Order
}

// RowSource gathers feature rows by node ID into out (len(ids) x Cols).
type RowSource interface {
	Gather(ids []int32, out []float32) error
}

// Gather copies the rows of nodes from the table.
func (s *HostStore) Gather(dst, nodes backend.Buffer) error {
	return s.GatherDropout(dst, nodes, 0, 0)
}

// GatherDropout copies the rows of nodes from the table, each value
// multiplied by its dropout mask value as backend.Dropout computes it.
func (s *HostStore) GatherDropout(dst, nodes backend.Buffer, p float32, seed uint64) error {
	if err := backend.CheckDropoutRate("cache.HostStore.GatherDropout", p); err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	if dst == nil || nodes == nil {
		return fmt.Errorf("%w: gather into or from a nil buffer", ErrInput)
	}
	n := nodes.Len()
	if dst.Len() != n*s.Cols {
		return fmt.Errorf("%w: gather of %d rows x %d into %d values", ErrInput, n, s.Cols, dst.Len())
	}
	if dt := dst.DType(); dt != backend.Float32 && dt != backend.BFloat16 {
		return fmt.Errorf("%w: gather into a %s buffer, want float32 or bfloat16", ErrInput, dt)
	}
	if n == 0 {
		return nil
	}
	ids := make([]int32, n)
	if err := s.B.Download(ids, nodes); err != nil {
		return err
	}
	out := make([]float32, n*s.Cols)
	if s.Source != nil {
		for i, v := range ids {
			if v < 0 || int(v) >= s.Rows {
				return fmt.Errorf("%w: node %d (position %d) not in [0, %d)", ErrInput, v, i, s.Rows)
			}
		}
		if err := s.Source.Gather(ids, out); err != nil {
			return err
		}
	} else {
		hot := s.hotRows()
		for i, v := range ids {
			if v < 0 || int(v) >= s.Rows {
				return fmt.Errorf("%w: node %d not in [0, %d)", ErrInput, v, s.Rows)
			}
			if hot != nil && !hot[v] {
				return fmt.Errorf("%w: node %d (position %d) is not one of the %d rows this store caches (OnlyHot)", ErrInput, v, i, len(s.Order))
			}
			copy(out[i*s.Cols:(i+1)*s.Cols], s.Table[int(v)*s.Cols:(int(v)+1)*s.Cols])
		}
	}
	dropRows(out, 0, p, seed)
	return uploadRows(s.B, dst, out)
}

// hotRows returns, with OnlyHot, whether each node is one of Order's
// (built once), else nil.
func (s *HostStore) hotRows() []bool {
	if !s.OnlyHot {
		return nil
	}
	s.hotOnce.Do(func() {
		s.hotSet = make([]bool, s.Rows)
		for _, v := range s.Order {
			if v >= 0 && int(v) < s.Rows {
				s.hotSet[v] = true
			}
		}
	})
	return s.hotSet
}

// GathersBF16 reports that the store writes bfloat16 rows too
// (BF16Gatherer): rounded on upload, after the dropout.
func (s *HostStore) GathersBF16() bool { return true }

// uploadRows uploads float32 rows into dst, a float32 buffer or a
// bfloat16 one (rounded to nearest even, backend.Convert's rounding).
func uploadRows(b backend.Backend, dst backend.Buffer, rows []float32) error {
	if dst.DType() != backend.BFloat16 {
		return b.Upload(dst, rows)
	}
	h := make([]uint16, len(rows))
	parallelRows(len(rows), func(lo, hi int) { backend.ToBF16(h[lo:hi], rows[lo:hi]) })
	return b.Upload(dst, h)
}

// dropRows applies input dropout to x, whose element i has the flat
// index base+i in the batch's rows: x[i] times its mask value, keep =
// 1/(1-p) or 0, the product backend.Dropout computes (bit for bit). A zero
// element (most of a bag-of-words row) is its own product with either
// mask value, sign included, so its mask is not drawn.
func dropRows(x []float32, base int, p float32, seed uint64) {
	if p == 0 {
		return
	}
	keep := 1 / (1 - p)
	for i := range x {
		if x[i] == 0 {
			continue
		}
		m := float32(0)
		if rng.DropUniform(seed, uint64(base+i)) >= p {
			m = keep
		}
		x[i] *= m
	}
}

// NodeOrderTable wraps the shared table as a buffer of B without copying
// it when B is the CPU back end at full precision, the store's notional
// cache holds every row and no RowSource replaces the table: CPU virtual
// devices then run the path a GPU whose cache holds every row runs.
func (s *HostStore) NodeOrderTable() (backend.Buffer, bool) {
	if _, ok := s.B.(*cpu.Backend); !ok || s.Source != nil || s.B.Precision() == backend.BF16 ||
		s.Rows <= 0 || s.Hot != s.Rows || len(s.Table) != s.Rows*s.Cols {
		return nil, false
	}
	return cpu.WrapF32(s.Table), true
}

// CachedTable copies the rows of Order from the table into one buffer
// of B (once; the store keeps it) when B is the CPU back end at full
// precision, no RowSource replaces the table and Order lists Hot nodes,
// fewer than Rows: CPU virtual devices then run the path a GPU whose
// partitioned cache holds its nodes' rows runs.
func (s *HostStore) CachedTable() (backend.Buffer, bool) {
	if _, ok := s.B.(*cpu.Backend); !ok || s.Source != nil || s.B.Precision() == backend.BF16 ||
		s.Hot <= 0 || s.Hot >= s.Rows || len(s.Order) != s.Hot || s.Cols <= 0 || len(s.Table) != s.Rows*s.Cols {
		return nil, false
	}
	s.cachedOnce.Do(func() {
		out := make([]float32, s.Hot*s.Cols)
		for i, v := range s.Order {
			if v < 0 || int(v) >= s.Rows {
				return
			}
			copy(out[i*s.Cols:(i+1)*s.Cols], s.Table[int(v)*s.Cols:(int(v)+1)*s.Cols])
		}
		s.cached = out
	})
	if s.cached == nil {
		return nil, false
	}
	return cpu.WrapF32(s.cached), true
}

func (s *HostStore) HotRows() int       { return s.Hot }
func (s *HostStore) DeviceBytes() int64 { return ValueBytes(s.B.Precision()) * int64(s.Hot*s.Cols) }
func (s *HostStore) Close() error       { return nil }

// header all-to-alls the loaders' headers (2 words per rank) on the host
// communicator, counting them as feature bytes on each link: local to
// itself, network to another host (tcp), peer otherwise.
func (l *Loader) header(ctx context.Context, hdr []int64) ([]int64, error) {
	c := l.cfg.Host
	if m := l.cfg.Metrics; m != nil {
		for p := range c.Size() {
			link := metrics.Peer
			if p == c.Rank() {
				link = metrics.Local
			} else if c.Kind() == "tcp" {
				link = metrics.Network
			}
			m.AddBytes(metrics.Feature, link, 16)
		}
	}
	got := make([]int64, len(hdr))
	return got, c.AllToAll(ctx, cpu.WrapI64(got), cpu.WrapI64(hdr))
}

// scale multiplies counts by k (rows to floats).
func scale(c []int, k int) []int {
	out := make([]int, len(c))
	for i, x := range c {
		out[i] = x * k
	}
	return out
}
