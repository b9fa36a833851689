package csp

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// ---- The tests' instrumentation of the production CPU machines: a
// wrapper that checks every buffer it sees (use after free, double free,
// views freed, leaks), fills new buffers with garbage (uninitialized
// memory is not zero), shuffles the nodes inside each owner's range after
// routing (the GPU's order there is arbitrary), and fails or corrupts
// calls on demand.

// checked wraps a rank's CPU machine (node-wise, layer-wise or walk).
type checked struct {
	in      Machine
	shuffle *rng.Stream

	mu     sync.Mutex
	bufs   map[backend.Buffer]bufState
	misuse []string // use after free, double free, broken contracts
	live   int      // buffers allocated (or adopted) and not freed
	// failAt makes the named operation fail on its n-th call (1-based).
	failAt map[string]int
	calls  map[string]int
	// corrupt makes the machine misbehave once: "owner" writes an
	// impossible owner into the frontier's degrees (the requester's host
	// check), "count" asks an owner for one edge more than the
	// allocation says (the owner's device check); for walks "walker"
	// sends a walker to a rank that does not own its node, "trace" a
	// trace of a walk its origin does not have.
	corrupt string
	// readCap bounds a Read's words: a GPU's node-wise and walk machines
	// read into a pinned buffer of ReadWords(P) words (the layer-wise
	// one grows its own); 0 for no bound.
	readCap int64
}

// bufState is a buffer's liveness flag (shared by an allocation and its
// views) and whether the buffer is a view.
type bufState struct {
	alive *bool
	view  bool
}

func newChecked(in Machine, seed uint64) *checked {
	s := rng.NewStream(seed)
	m := &checked{in: in, shuffle: &s, bufs: map[backend.Buffer]bufState{}}
	switch x := in.(type) {
	case *cpuMachine:
		m.readCap = ReadWords(x.P)
	case *cpuWalkMachine:
		m.readCap = ReadWords(x.P)
	}
	return m
}

func (m *checked) bad(format string, args ...any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	m.misuse = append(m.misuse, msg)
	return fmt.Errorf("checked machine: %s", msg)
}

// adopt registers buffers allocated before the wrapper (the control
// words) as live allocations.
func (m *checked) adopt(bufs ...backend.Buffer) {
	for _, b := range bufs {
		m.own(b)
	}
}

func (m *checked) own(b backend.Buffer) {
	alive := true
	m.mu.Lock()
	m.bufs[b] = bufState{alive: &alive}
	m.live++
	m.mu.Unlock()
}

// release ends an allocation's life (freed, or handed over).
func (m *checked) release(op string, b backend.Buffer) error {
	m.mu.Lock()
	st, ok := m.bufs[b]
	m.mu.Unlock()
	if !ok || st.view || !*st.alive {
		return m.bad("%s of a %s", op, describe(ok, st))
	}
	m.mu.Lock()
	*st.alive = false
	m.live--
	m.mu.Unlock()
	return nil
}

func describe(known bool, st bufState) string {
	switch {
	case !known:
		return "buffer the machine never returned"
	case st.view:
		return "view"
	}
	return "freed buffer"
}

// enter counts a call of op, fails it where asked, and checks buffers.
func (m *checked) enter(op string, bufs ...backend.Buffer) error {
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
		m.mu.Lock()
		st, ok := m.bufs[b]
		m.mu.Unlock()
		if !ok || !*st.alive {
			return m.bad("%s: argument %d is a %s", op, i, describe(ok, st))
		}
	}
	return nil
}

// after records a broken contract the production machine reported.
func (m *checked) after(op string, err error) error {
	if errors.Is(err, errContract) {
		m.bad("%s: %v", op, err)
	}
	return err
}

func (m *checked) Alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	if err := m.enter("alloc"); err != nil {
		return nil, err
	}
	if n < 0 || n > maxEntries {
		return nil, m.bad("alloc of %d", n)
	}
	b, err := m.in.Alloc(dt, n)
	if err != nil {
		return nil, m.after("alloc", err)
	}
	for i := range i32s(b) {
		i32s(b)[i] = -7
	}
	for i := range i64s(b) {
		i64s(b)[i] = -7
	}
	m.own(b)
	return b, nil
}

func (m *checked) Free(b backend.Buffer) {
	if m.release("free", b) == nil {
		m.in.Free(b)
	}
}

func (m *checked) View(b backend.Buffer, off, n int64) backend.Buffer {
	m.mu.Lock()
	st, ok := m.bufs[b]
	m.mu.Unlock()
	if !ok || off < 0 || n < 0 || off+n > int64(b.Len()) {
		m.bad("view [%d, %d) of a %d-element %s", off, off+n, b.Len(), describe(ok, st))
		return cpu.WrapI64(nil)
	}
	v := m.in.View(b, off, n)
	m.mu.Lock()
	m.bufs[v] = bufState{alive: st.alive, view: true}
	m.mu.Unlock()
	return v
}

func (m *checked) Upload(dst backend.Buffer, src any) error {
	if err := m.enter("upload", dst); err != nil {
		return err
	}
	return m.after("upload", m.in.Upload(dst, src))
}

func (m *checked) Read(dst []int64, srcs []backend.Buffer, n []int64) error {
	if err := m.enter("read", srcs...); err != nil {
		return err
	}
	var words int64
	for _, k := range n {
		words += k
	}
	if m.readCap > 0 && words > m.readCap {
		return m.bad("a read of %d words, more than the %d of a GPU machine's pinned buffer (ReadWords)", words, m.readCap)
	}
	return m.after("read", m.in.Read(dst, srcs, n))
}

func (m *checked) Route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	if err := m.enter("route", hdr, sendIDs, pos, F, nFB, ctr); err != nil {
		return err
	}
	if err := m.after("route", m.in.Route(hdr, sendIDs, pos, F, nFB, ctr, fcap, key, hop, fanout, hops)); err != nil {
		return err
	}
	m.shuffleRanges(hdr, sendIDs, pos)
	return nil
}

// shuffleRanges permutes the routed nodes inside each owner's range (the
// header's counts).
func (m *checked) shuffleRanges(hdr, sendIDs, pos backend.Buffer) {
	ids, ps, h := i32s(sendIDs), i32s(pos), i64s(hdr)
	at := 0
	for p := range len(h) / HeaderWords {
		n := int(h[p*HeaderWords+hCount])
		for i := n - 1; i > 0; i-- {
			j := int(m.shuffle.Below(uint64(i + 1)))
			ids[at+i], ids[at+j] = ids[at+j], ids[at+i]
			ps[at+i], ps[at+j] = ps[at+j], ps[at+i]
		}
		at += n
	}
}

func (m *checked) DrawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error {
	if err := m.enter("drawStrided", ids, ans, ansE); err != nil {
		return err
	}
	return m.after("drawStrided", m.in.DrawStrided(h, ids, R, seg, keys, ans, ansE))
}

func (m *checked) UnpackStrided(ptr, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error {
	if err := m.enter("unpackStrided", ptr, src, eid, ans, ansE, pos); err != nil {
		return err
	}
	return m.after("unpackStrided", m.in.UnpackStrided(ptr, src, eid, ans, ansE, pos, nF, k))
}

func (m *checked) CountExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error) {
	if err := m.enter("countExact", ids); err != nil {
		return nil, nil, err
	}
	if qptr, tot, err = m.in.CountExact(h, ids, R, roff); err != nil {
		return nil, nil, m.after("countExact", err)
	}
	m.adopt(qptr, tot)
	return qptr, tot, nil
}

func (m *checked) DrawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error {
	if err := m.enter("drawExact", ids, qptr, packed, eid); err != nil {
		return err
	}
	return m.after("drawExact", m.in.DrawExact(h, ids, qptr, R, roff, keys, packed, eid, E))
}

func (m *checked) UnpackExact(ptr, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error {
	if err := m.enter("unpackExact", ptr, src, eid, ans, ansE, pos); err != nil {
		return err
	}
	return m.after("unpackExact", m.in.UnpackExact(ptr, src, eid, ans, ansE, pos, bptr, S, nF, E))
}

func (m *checked) Relabel(F backend.Buffer, nF int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	if err := m.enter("relabel", F, src, ptr); err != nil {
		return nil, nil, nil, err
	}
	if srcNodes, local, sizes, err = m.in.Relabel(F, nF, src, ptr, e); err != nil {
		return nil, nil, nil, m.after("relabel", err)
	}
	m.adopt(srcNodes, local, sizes)
	return srcNodes, local, sizes, nil
}

// Batch hands the parts over: they leave the wrapper's books.
func (m *checked) Batch(outs []HopOut, seeds []graph.NodeID) (*Batch, error) {
	for _, o := range outs {
		for _, b := range []backend.Buffer{o.Indptr, o.Indices, o.SrcNodes, o.EdgeIDs, o.Sizes} {
			if err := m.release("batch", b); err != nil {
				return nil, err
			}
		}
	}
	b, err := m.in.Batch(outs, seeds)
	return b, m.after("batch", err)
}

func (m *checked) Shrink(b backend.Buffer, n int64) (backend.Buffer, error) {
	if err := m.release("shrink", b); err != nil {
		return nil, err
	}
	s, err := m.in.Shrink(b, n)
	return s, m.after("shrink", err)
}

func (m *checked) Close() error { return m.in.Close() }

// Layer-wise kernels.

func (m *checked) lm() LayerMachine { return m.in.(LayerMachine) }

func (m *checked) Info(ids backend.Buffer, R int64, out, bad backend.Buffer) error {
	if err := m.enter("info", ids, out, bad); err != nil {
		return err
	}
	return m.after("info", m.lm().Info(ids, R, out, bad))
}

func (m *checked) FrontierInfo(out, in, pos backend.Buffer, bptr []int64, nF int64) error {
	if err := m.enter("frontierInfo", out, in, pos); err != nil {
		return err
	}
	if err := m.after("frontierInfo", m.lm().FrontierInfo(out, in, pos, bptr, nF)); err != nil {
		return err
	}
	if m.corrupt == "owner" && nF > 0 {
		i64s(out)[0] |= int64(len(bptr)+2) << ownerShift
		m.corrupt = ""
	}
	return nil
}

func (m *checked) PackAlloc(allocG, msg, allocF, pos backend.Buffer, bptr, hdr []int64, nF int64) error {
	if err := m.enter("packAlloc", allocG, msg, allocF, pos); err != nil {
		return err
	}
	if err := m.after("packAlloc", m.lm().PackAlloc(allocG, msg, allocF, pos, bptr, hdr, nF)); err != nil {
		return err
	}
	if m.corrupt == "count" && nF > 0 {
		q := edgeRow(bptr, int64(len(bptr)-1), 0)
		i64s(msg)[2*(q+1)]++
		m.corrupt = ""
	}
	return nil
}

func (m *checked) DrawLayer(ids, info, msg backend.Buffer, R int64, roff, tot []int64, keys []uint64, src, eid backend.Buffer, E int64, bad backend.Buffer) error {
	if err := m.enter("drawLayer", ids, info, msg, src, eid, bad); err != nil {
		return err
	}
	return m.after("drawLayer", m.lm().DrawLayer(ids, info, msg, R, roff, tot, keys, src, eid, E, bad))
}

func (m *checked) UnpackLayer(src, eid, ans, ansE, ptr, allocG, pos backend.Buffer, nF, E int64, bad backend.Buffer) error {
	if err := m.enter("unpackLayer", src, eid, ans, ansE, ptr, allocG, pos, bad); err != nil {
		return err
	}
	return m.after("unpackLayer", m.lm().UnpackLayer(src, eid, ans, ansE, ptr, allocG, pos, nF, E, bad))
}

// Walk kernels.

func (m *checked) wm() WalkMachine { return m.in.(WalkMachine) }

func (m *checked) RouteOrigins(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, hop, fanout, hops int) error {
	if err := m.enter("routeOrigins", hdr, sendIDs, pos, F, nFB, ctr); err != nil {
		return err
	}
	if err := m.after("routeOrigins", m.wm().RouteOrigins(hdr, sendIDs, pos, F, nFB, ctr, fcap, hop, fanout, hops)); err != nil {
		return err
	}
	m.shuffleRanges(hdr, sendIDs, pos)
	return nil
}

func (m *checked) InitWalks(out, starts backend.Buffer, n int64, L int) error {
	if err := m.enter("initWalks", out, starts); err != nil {
		return err
	}
	return m.after("initWalks", m.wm().InitWalks(out, starts, n, L))
}

func (m *checked) Pack(dst, src, pos backend.Buffer, n int64, w int) error {
	if err := m.enter("pack", dst, src, pos); err != nil {
		return err
	}
	if err := m.after("pack", m.wm().Pack(dst, src, pos, n, w)); err != nil {
		return err
	}
	if m.corrupt == "walker" && n > 0 && w == walkWords {
		i64s(dst)[3] = m.in.(*cpuWalkMachine).lo - 1 // a node the receiver does not own (or -1)
		m.corrupt = ""
	}
	if m.corrupt == "trace" && n > 0 && w == traceWords {
		i64s(dst)[0] = 1 << 40
		m.corrupt = ""
	}
	return nil
}

func (m *checked) Step(t int, recv backend.Buffer, R int64, rec, F, trO, trR, bad backend.Buffer) error {
	if err := m.enter("step", recv, rec, F, trO, trR, bad); err != nil {
		return err
	}
	return m.after("step", m.wm().Step(t, recv, R, rec, F, trO, trR, bad))
}

func (m *checked) Concat(dst backend.Buffer, srcs []backend.Buffer, n []int64) error {
	if err := m.enter("concat", append([]backend.Buffer{dst}, srcs...)...); err != nil {
		return err
	}
	return m.after("concat", m.wm().Concat(dst, srcs, n))
}

func (m *checked) Scatter(out, recv backend.Buffer, k, n int64, L int, bad backend.Buffer) error {
	if err := m.enter("scatter", out, recv, bad); err != nil {
		return err
	}
	return m.after("scatter", m.wm().Scatter(out, recv, k, n, L, bad))
}

// checkMachines fails the test on any misuse of a checked machine, and
// on buffers left allocated besides want (the protocol's own).
func checkMachines(t *testing.T, name string, ms []*checked, want int) {
	t.Helper()
	for r, m := range ms {
		m.mu.Lock()
		misuse, live := strings.Join(m.misuse, "; "), m.live
		m.mu.Unlock()
		if misuse != "" {
			t.Fatalf("%s: rank %d: %s", name, r, misuse)
		}
		if live != want {
			t.Fatalf("%s: rank %d holds %d buffers, want %d (the protocol's own)", name, r, live, want)
		}
	}
}

// ---- Ranks on CPU back ends, as dsp/engine builds them.

// cpuComms returns the device communicators of P CPU back ends: staged
// over in-process ones, as dsp/engine's CPU runs have them, with the debug
// check of every call's sizes against the peers' (nil for P = 1). A
// non-nil hook (pipeline.RandomDelays) runs before every collective.
func cpuComms(t testing.TB, bs []*cpu.Backend, hook pipeline.Hook) []comm.Comm {
	t.Helper()
	P := len(bs)
	if P == 1 {
		return nil
	}
	o := comm.Options{Timeout: 30 * time.Second, Debug: true}
	hs, err := inproc.New(P, o)
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]comm.Comm, P)
	for r := range P {
		cs[r] = staged.Open(hs[r], bs[r], o)
		if hook != nil {
			cs[r] = &pipeline.Comm{Comm: cs[r], Name: "sampler", Hook: hook}
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func cpuBackends(t testing.TB, P int) []*cpu.Backend {
	t.Helper()
	bs := make([]*cpu.Backend, P)
	for r := range bs {
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bs[r] = b
	}
	return bs
}

// openCPUGroup opens one sampler per rank of offsets off over g with
// open, each on its own CPU back end over its patch, the communicators
// from cpuComms.
func openCPUGroup[S interface{ Close() error }](t testing.TB, g *graph.CSR, off []int64, hook pipeline.Hook, open func(*cpu.Backend, *layout.Patch, comm.Comm) (S, error)) []S {
	t.Helper()
	P := len(off) - 1
	bs := cpuBackends(t, P)
	cs := cpuComms(t, bs, hook)
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	ss := make([]S, P)
	for r := range P {
		p, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		var c comm.Comm
		if cs != nil {
			c = cs[r]
		}
		if ss[r], err = open(bs[r], p, c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range ss {
			s.Close()
		}
	})
	return ss
}

// cpuGroup opens node-wise samplers on CPU back ends that run the
// protocol (a single rank too), their machines checked.
func cpuGroup(t testing.TB, g *graph.CSR, off []int64, cfg Config, hook pipeline.Hook) ([]*Sampler, []*checked) {
	t.Helper()
	var ms []*checked
	ss := openCPUGroup(t, g, off, hook, func(be *cpu.Backend, p *layout.Patch, c comm.Comm) (*Sampler, error) {
		s, err := New(be, p, off, c, cfg)
		if err != nil {
			return nil, err
		}
		s.direct = false
		m := newChecked(s.p.m, uint64(77+p.Rank))
		m.adopt(s.p.ctl)
		s.p.m = m
		ms = append(ms, m)
		return s, nil
	})
	return ss, ms
}

// cpuLayerGroup opens layer-wise samplers on CPU back ends, their
// machines checked.
func cpuLayerGroup(t testing.TB, g *graph.CSR, off []int64, cfg Config, hook pipeline.Hook) ([]*LayerSampler, []*checked) {
	t.Helper()
	var ms []*checked
	ss := openCPUGroup(t, g, off, hook, func(be *cpu.Backend, p *layout.Patch, c comm.Comm) (*LayerSampler, error) {
		s, err := NewLayer(be, p, off, c, cfg)
		if err != nil {
			return nil, err
		}
		m := newChecked(s.p.m, uint64(91+p.Rank))
		m.adopt(s.p.ctl, s.p.bad)
		s.p.proto.m, s.p.lm = m, m
		ms = append(ms, m)
		return s, nil
	})
	return ss, ms
}

// cpuWalkGroup opens walkers on CPU back ends, their machines checked.
func cpuWalkGroup(t testing.TB, g *graph.CSR, off []int64, length int, hook pipeline.Hook) ([]*Walker, []*checked) {
	t.Helper()
	var ms []*checked
	ws := openCPUGroup(t, g, off, hook, func(be *cpu.Backend, p *layout.Patch, c comm.Comm) (*Walker, error) {
		w, err := NewWalker(be, p, off, c, length, 0)
		if err != nil {
			return nil, err
		}
		m := newChecked(w.p.m, uint64(17+p.Rank))
		m.adopt(w.p.ctl, w.p.bad)
		w.p.proto.m, w.p.wm = m, m
		ms = append(ms, m)
		return w, nil
	})
	return ws, ms
}

// otherBackend is a back end that is neither CUDA nor the CPU's.
type otherBackend struct{ backend.Backend }

func (otherBackend) Name() string { return "other" }
