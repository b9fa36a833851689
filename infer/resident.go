package infer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Residency says whether a hidden layer's output stays in device memory
// (Options.Resident).
type Residency int

// Residencies.
const (
	// ResidentAuto keeps a hidden layer's output on the devices when
	// every device reports its memory (backend.Memory: GPUs) and its
	// range of the output fits beside the chunk budget; otherwise, and
	// on back ends that do not report memory (the CPU) unless
	// Options.ResidentBytes is set, the output goes to host memory.
	ResidentAuto Residency = iota
	// ResidentOff always writes hidden layers to host memory.
	ResidentOff
	// ResidentOn keeps every hidden layer on the devices wherever the
	// allocation succeeds (and Options.ResidentBytes allows), on any
	// back end: CPU virtual devices run the GPUs' path.
	ResidentOn
)

// ErrPeer is wrapped when another device of a resident layer's exchange
// failed (the device that failed reports its own error).
var ErrPeer = errors.New("infer: another device failed")

// resLayer is a layer's output kept on the devices: device d holds the
// rows of its destination nodes (its range of node IDs, or its part of
// the layer's needed nodes), in order.
type resLayer struct {
	bufs  []backend.Buffer // per device, rows[d] x width float32
	rows  []int
	width int
	base  []int // per device: index in need of its first node (need != nil)
	need  []int32
	rank  *rankIndex // positions in need (need != nil)
	bytes int64      // the largest device's
	// where, when set, locates a node's row (the features' shards,
	// Options.InputShards); otherwise device owner(u) holds it, at its
	// offset in the device's range or part of need.
	where func(u int32) (int, int32)
	// caller: the buffers are the caller's (the features' shards),
	// never freed here.
	caller bool
}

// free releases the buffers. The slice stays: a device given up on as
// stalled may still wake and read it, and then fails on the freed
// buffers instead of an index.
func (rl *resLayer) free(bs []backend.Backend) {
	if rl.caller {
		return
	}
	for d, b := range rl.bufs {
		if b != nil {
			bs[d].Free(b)
			rl.bufs[d] = nil
		}
	}
}

// residentPlan decides where hidden layer l's output goes: a resLayer
// when it stays on the devices (allocated), else nil with the reason.
func (r *run) residentPlan(ctx context.Context, l int) (*resLayer, string) {
	p := len(r.opts.Backends)
	mode := r.opts.Resident
	switch {
	case l >= r.last:
		return nil, "requested layer"
	case mode == ResidentOff:
		return nil, "resident layers off"
	case r.opts.Placement == PlaceHost:
		return nil, "host placement"
	}
	w := r.layers[0].LayerWidth(l)
	rl := &resLayer{width: w, rows: make([]int, p), base: make([]int, p), need: r.need[l]}
	if rl.need != nil {
		rl.rank = newRankIndex(r.n, rl.need)
	}
	need := make(map[backend.Backend]int64) // bytes per back end (virtual devices share one)
	for d, b := range r.opts.Backends {
		nodes, lo, hi, base := r.nodesOf(l, d)
		rl.rows[d], rl.base[d] = int(hi-lo), base
		if nodes != nil {
			rl.rows[d] = len(nodes)
		}
		bytes := 4 * int64(rl.rows[d]) * int64(w)
		rl.bytes = max(rl.bytes, bytes)
		if lim := r.opts.ResidentBytes; lim > 0 && bytes > lim {
			return nil, fmt.Sprintf("%s needs %s, over the %s allowed", b.Name(), gb(bytes), gb(lim))
		}
		// The chunk's own workspace, and as much again for the exchange's
		// staging (the rows asked of this device and those it receives).
		need[b] += bytes + 2*r.budgets[d]
	}
	for d, b := range r.opts.Backends {
		m, ok := b.(backend.Memory)
		if !ok {
			if mode != ResidentOn && r.opts.ResidentBytes == 0 {
				return nil, b.Name() + " does not report its memory"
			}
			continue
		}
		free, _, err := m.MemInfo()
		if err != nil {
			return nil, fmt.Sprintf("memory of %s: %v", b.Name(), err)
		}
		if uint64(need[b]) > free {
			return nil, fmt.Sprintf("device %d (%s) has %s free, needs %s", d, b.Name(), gb(int64(free)), gb(need[b]))
		}
	}
	if p > 1 {
		if err := r.openExchange(ctx); err != nil {
			return nil, err.Error()
		}
	}
	rl.bufs = make([]backend.Buffer, p)
	for d, b := range r.opts.Backends {
		buf, err := allocRaw(b, backend.Float32, rl.rows[d]*w) // the chunks write every row
		if err != nil {
			rl.free(r.opts.Backends)
			return nil, fmt.Sprintf("%s: %v", b.Name(), err)
		}
		rl.bufs[d] = buf
	}
	return rl, ""
}

// allocRaw allocates without zeroing on back ends that can (the CUDA
// back end's AllocRaw), for buffers written completely before they are
// read.
func allocRaw(b backend.Backend, dt backend.DType, n int) (backend.Buffer, error) {
	if ra, ok := b.(interface {
		AllocRaw(backend.DType, int) (backend.Buffer, error)
	}); ok {
		return ra.AllocRaw(dt, n)
	}
	return b.Alloc(dt, n)
}

// gb formats bytes for the log.
func gb(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

// openExchange sets r.exch: the caller's communicators (Options.Exchange),
// those kept by Options.Keep, or new ones: in-process between back ends
// that do not report memory (the CPU's buffers are host memory), NCCL
// between GPUs where it loads.
func (r *run) openExchange(ctx context.Context) error {
	if r.exch != nil {
		return nil
	}
	bs := r.opts.Backends
	p := len(bs)
	if cs := r.opts.Exchange; cs != nil {
		for d, c := range cs {
			if c == nil || c.Size() != p || c.Rank() != d {
				return fmt.Errorf("exchange communicator %d is not rank %d of %d", d, d, p)
			}
		}
		r.exch = cs
		return nil
	}
	if cs := r.opts.Keep.exchange(); cs != nil {
		r.exch = cs
		return nil
	}
	o := comm.Options{Timeout: r.stall()}
	gpus := 0
	for _, b := range bs {
		if _, ok := b.(backend.Memory); ok {
			gpus++
		}
	}
	var cs []comm.Comm
	var err error
	switch {
	case gpus == 0:
		cs, err = inproc.New(p, o)
	case gpus == p:
		if err = nccl.Available(); err == nil {
			// Asynchronous: the host queues the next rounds while the
			// devices exchange (a layer's workers Sync at its end).
			cs, err = nccl.OpenLocal(ctx, bs, nccl.Options{Options: o, Prefix: "infer", Async: true})
		}
	default:
		err = fmt.Errorf("devices of mixed kinds")
	}
	if err != nil {
		return fmt.Errorf("no exchange between the devices: %v", err)
	}
	r.exch = cs
	if !r.opts.Keep.keepExchange(cs) {
		r.ownExch = true
	}
	return nil
}

// closeExchange closes communicators this run opened and did not hand
// to Options.Keep; after a failure (a broken communicator) it drops the
// kept ones too.
func (r *run) closeExchange(failed bool) {
	if r.exch == nil {
		return
	}
	if failed && r.opts.Exchange == nil && !r.ownExch {
		r.opts.Keep.dropExchange()
		r.ownExch = true
	}
	if r.ownExch {
		for _, c := range r.exch {
			c.Close()
		}
	}
	r.exch, r.ownExch = nil, false
}

// owner returns the device whose range holds node u.
func (r *run) owner(u int32) int {
	off := r.opts.Offsets
	o := 0 // a scan: a few devices, looked up for every source of every chunk
	for o < len(off)-2 && off[o+1] <= int64(u) {
		o++
	}
	return o
}

// route is a chunk's sources sorted by the device holding their rows of
// a resident layer: own rows first, then each peer's in rank order.
type route struct {
	grouped []int32 // rows in the holders' buffers, own first
	perm    []int32 // perm[i]: the staging row of source i
	counts  []int   // rows asked of each device (own included)
}

// locate returns the device holding node u's row of rl and the row.
func (r *run) locate(rl *resLayer, u int32) (int, int32, error) {
	var o int
	var k int64
	if rl.where != nil {
		dev, row := rl.where(u)
		if dev < 0 || dev >= len(rl.rows) {
			return 0, 0, fmt.Errorf("source node %d: held by device %d of %d", u, dev, len(rl.rows))
		}
		o, k = dev, int64(row)
	} else {
		o = r.owner(u)
		k = int64(u) - r.opts.Offsets[o]
		if rl.need != nil {
			j, ok := rl.rank.rank(u)
			if !ok {
				return 0, 0, fmt.Errorf("source node %d was not computed by the layer below", u)
			}
			k = int64(j - rl.base[o])
		}
	}
	if k < 0 || k >= int64(rl.rows[o]) {
		return 0, 0, fmt.Errorf("source node %d: row %d of device %d's %d", u, k, o, rl.rows[o])
	}
	return o, int32(k), nil
}

// routeOf routes src over rl (the layer below's output, or the
// features' shards), split over up to workers goroutines: each part
// counts its sources per holder, and places them from the running
// counts of the parts before it, so the route is one pass's in order.
func (r *run) routeOf(rl *resLayer, d int, src []int32, workers int) (*route, error) {
	p := len(r.opts.Backends)
	n := len(src)
	rt := &route{grouped: make([]int32, n), perm: make([]int32, n), counts: make([]int, p)}
	own := make([]int32, n)
	row := make([]int32, n)
	parts := max(1, min(workers, n>>15))
	cnt := make([][]int, parts)
	errs := make([]error, parts)
	forParts(n, parts, func(q, a, b int) {
		c := make([]int, p)
		for i := a; i < b; i++ {
			o, k, err := r.locate(rl, src[i])
			if err != nil {
				errs[q] = err
				return
			}
			own[i], row[i] = int32(o), k
			c[o]++
		}
		cnt[q] = c
	})
	for _, err := range errs { // the lowest part's: the first bad source
		if err != nil {
			return nil, err
		}
	}
	for _, c := range cnt {
		for o, x := range c {
			rt.counts[o] += x
		}
	}
	// Own rows first, then each peer's in rank order.
	next := make([]int, p)
	s := rt.counts[d]
	for q := range p {
		if q != d {
			next[q] = s
			s += rt.counts[q]
		}
	}
	starts := make([][]int, parts)
	for q := range parts {
		starts[q] = slices.Clone(next)
		for o := range p {
			next[o] += cnt[q][o]
		}
	}
	forParts(n, parts, func(q, a, b int) {
		st := starts[q]
		for i := a; i < b; i++ {
			o := own[i]
			j := st[o]
			st[o]++
			rt.grouped[j], rt.perm[i] = row[i], int32(j)
		}
	})
	return rt, nil
}

// fetch returns a new buffer holding the rows of src (len(src) x width)
// from the resident layer w.rin (routed by rt, routeOf's), gathered from the devices that hold
// them: an exchange every device of the layer takes part in once per
// round, in lockstep (src nil: a round in which this device only serves).
// With bad set, the device only tells the others, in the header, that it
// failed, and returns bad.
//
//  1. the header: every device tells every other how many rows it asks
//     of it, and whether it failed (all-to-all of 2 words per device);
//  2. the requests (rows in the holders' buffers) go out (all-to-all-v);
//  3. each holder gathers the asked rows, and they come back
//     (all-to-all-v), after the own rows gathered locally;
//  4. the staged rows are put in source order (a gather by perm).
//
// With one device, or no communicators, only the local gather runs.
func (w *worker) fetch(ctx context.Context, src []int32, rt *route, bad error) (backend.Buffer, error) {
	r, b, d, rl := w.r, w.b, w.d, w.rin
	p := len(r.opts.Backends)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	width := rl.width
	if bad != nil || src == nil {
		rt = nil
	}
	var bufs []backend.Buffer
	defer func() {
		for _, x := range bufs {
			b.Free(x)
		}
	}()
	alloc := func(dt backend.DType, n int) (backend.Buffer, error) {
		x, err := allocRaw(b, dt, n) // every staging buffer is written before it is read
		if err == nil {
			bufs = append(bufs, x)
		}
		return x, err
	}
	upload := func(v []int32) (backend.Buffer, error) {
		x, err := alloc(backend.Int32, len(v))
		if err == nil && len(v) > 0 {
			err = b.Upload(x, v)
		}
		return x, err
	}
	n, a := 0, 0
	var grouped, stage backend.Buffer
	if rt != nil {
		n, a = len(src), rt.counts[d]
		var err error
		if grouped, err = upload(rt.grouped); err == nil {
			stage, err = alloc(backend.Float32, n*width)
		}
		if err == nil && a > 0 {
			err = gatherView(b, stage, 0, a, rl.bufs[d], rl.rows[d], grouped, width)
		}
		if err != nil {
			bad = err
		}
	}
	if p == 1 || w.exch == nil {
		if bad != nil {
			return nil, bad
		}
		if rt == nil {
			return nil, nil
		}
		return w.order(stage, rt, n, width, &bufs)
	}
	// 1. The header.
	hdr := make([]int64, 2*p)
	send := make([]int, p)
	for q := range p {
		switch {
		case bad != nil:
			hdr[2*q] = 1
		case rt != nil && q != d:
			send[q] = rt.counts[q]
			hdr[2*q+1] = int64(send[q])
		}
	}
	w.clk.mark(phaseInput)
	got, err := w.header(ctx, hdr)
	w.clk.mark(phaseLockstep)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	recv := make([]int, p)
	var failed []string
	total := 0
	for q := range p {
		if got[2*q] != 0 {
			failed = append(failed, r.deviceName(q))
		}
		c := got[2*q+1]
		if c < 0 || c > int64(rl.rows[d]) || (q == d && c != 0) {
			return nil, fmt.Errorf("device %d asks for %d rows of %d", q, c, rl.rows[d])
		}
		recv[q] = int(c)
		total += int(c)
	}
	if failed != nil {
		return nil, fmt.Errorf("%w: %v", ErrPeer, failed)
	}
	// 2. The requests.
	asked, err := alloc(backend.Int32, total)
	if err != nil {
		return nil, err
	}
	var out backend.Buffer = asked
	if rt != nil {
		if out, err = backend.View(grouped, a, n-a); err != nil {
			return nil, err
		}
	} else if out, err = alloc(backend.Int32, 0); err != nil {
		return nil, err
	}
	if err := w.r.collective(ctx, "requests", func(ctx context.Context) error {
		return w.exch.AllToAllV(ctx, asked, recv, out, send)
	}); err != nil {
		return nil, err
	}
	// 3. The rows.
	served, err := alloc(backend.Float32, total*width)
	if err != nil {
		return nil, err
	}
	if total > 0 {
		if err := b.GatherRows(served, rl.bufs[d], asked, rl.rows[d], width); err != nil {
			return nil, err
		}
	}
	var into backend.Buffer
	if rt != nil {
		into, err = backend.View(stage, a*width, (n-a)*width)
	} else {
		into, err = alloc(backend.Float32, 0)
	}
	if err != nil {
		return nil, err
	}
	if err := w.r.collective(ctx, "rows", func(ctx context.Context) error {
		return w.exch.AllToAllV(ctx, into, scale(send, width), served, scale(recv, width))
	}); err != nil {
		return nil, err
	}
	if rt == nil {
		return nil, nil
	}
	// 4. Source order.
	return w.order(stage, rt, n, width, &bufs)
}

// order returns a new buffer with stage's rows in source order (rt.perm).
func (w *worker) order(stage backend.Buffer, rt *route, n, width int, bufs *[]backend.Buffer) (backend.Buffer, error) {
	b := w.b
	perm, err := b.Alloc(backend.Int32, n)
	if err != nil {
		return nil, err
	}
	*bufs = append(*bufs, perm)
	if n > 0 {
		if err := b.Upload(perm, rt.perm); err != nil {
			return nil, err
		}
	}
	x, err := allocRaw(b, backend.Float32, n*width)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		if err := b.GatherRows(x, stage, perm, n, width); err != nil {
			b.Free(x)
			return nil, err
		}
	}
	return x, nil
}

// gatherView gathers rows idx[0:n) of x (xrows x width) into dst's rows
// at..at+n.
func gatherView(b backend.Backend, dst backend.Buffer, at, n int, x backend.Buffer, xrows int, idx backend.Buffer, width int) error {
	dv, err := backend.View(dst, at*width, n*width)
	if err != nil {
		return err
	}
	iv, err := backend.View(idx, 0, n)
	if err != nil {
		return err
	}
	return b.GatherRows(dv, x, iv, xrows, width)
}

// header exchanges the round's header (2 words per device) with the
// other devices through the run's board and returns what every device
// sent this one.
func (w *worker) header(ctx context.Context, hdr []int64) ([]int64, error) {
	r := w.r
	got, err := w.board.exchange(ctx, w.d, w.round, hdr, r.stall(), r.deviceName)
	w.round++
	return got, err
}

// collective runs one step of the exchange within the stall timeout and
// names, when it fails for want of peers, the devices that did not take
// part.
func (r *run) collective(ctx context.Context, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.stall())
	defer cancel()
	err := f(ctx)
	if err == nil {
		return nil
	}
	var oe *comm.OpError
	if errors.As(err, &oe) && len(oe.Missing) > 0 {
		var names []string
		for _, q := range oe.Missing {
			if q >= 0 && q < len(r.opts.Backends) {
				names = append(names, r.deviceName(q))
			}
		}
		return fmt.Errorf("exchange of the %s: %v did not take part within %v: %w", what, names, r.stall(), err)
	}
	return fmt.Errorf("exchange of the %s: %w", what, err)
}

// deviceName names device q in messages.
func (r *run) deviceName(q int) string {
	return fmt.Sprintf("%s (device %d)", r.opts.Backends[q].Name(), q)
}

// scale multiplies counts by k (rows to floats).
func scale(c []int, k int) []int {
	out := make([]int, len(c))
	for i, x := range c {
		out[i] = x * k
	}
	return out
}
