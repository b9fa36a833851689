package fullgraph

import (
	"math"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// layerState is one layer's historical data on one device.
//
// Forward: xall is the layer's N x width payload matrix as this device
// sees it: its own block holds its fresh payload, block s the latest copy
// of device s's payload this device received (historical embeddings);
// age[s] is how many epochs old that copy is. Every device tracks every
// block's age from the flag exchange, so the ages agree everywhere.
//
// Backward, with Staleness.Gradients: gsent[s] is the contribution last
// sent to owner s and gage[s] its age (sender side); grecv[r] the
// contribution last received from device r (receiver side).
type layerState struct {
	xall   backend.Buffer
	age    []int
	valid  bool
	clean  backend.Buffer // dropout-free version of the own block last broadcast
	normSq float64        // ||clean||^2

	// Constant payloads (the input features, unprojected): every device's
	// dropout-free copy of every block, received once; each epoch the
	// receivers draw the owners' dropout masks on it themselves.
	xconst backend.Buffer
	// DriftParams: the parameters of layers 0..l when the own block was
	// last broadcast, and their squared norm.
	psnap   []backend.Buffer
	psnapSq float64

	gsent     []backend.Buffer
	gsentNorm []float64
	gage      []int
	grecv     []backend.Buffer
	gvalid    bool
}

func newLayerState(p int) *layerState {
	return &layerState{age: make([]int, p),
		gsent: make([]backend.Buffer, p), gsentNorm: make([]float64, p), gage: make([]int, p),
		grecv: make([]backend.Buffer, p)}
}

func (st *layerState) free(b backend.Backend) {
	if st == nil {
		return
	}
	for _, bufs := range [][]backend.Buffer{st.gsent, st.grecv} {
		for i, x := range bufs {
			b.Free(x)
			bufs[i] = nil
		}
	}
	for i, x := range st.psnap {
		b.Free(x)
		st.psnap[i] = nil
	}
	b.Free(st.xall)
	b.Free(st.clean)
	b.Free(st.xconst)
	st.xall, st.clean, st.xconst = nil, nil, nil
}

// cacheBytes returns the bytes of the layer's historical copies.
func (st *layerState) cacheBytes() int64 {
	var n int64
	for _, bufs := range [][]backend.Buffer{st.gsent, st.grecv, st.psnap, {st.xall, st.clean, st.xconst}} {
		for _, x := range bufs {
			if x != nil {
				n += 4 * int64(x.Len())
			}
		}
	}
	return n
}

// persistent returns *slot, allocating it (n floats, kept across steps)
// on first use.
func (w *worker) persistent(s *step, slot *backend.Buffer, n int) backend.Buffer {
	if *slot == nil && s.ok() {
		buf, err := w.b.AllocRaw(backend.Float32, n) // written before it is read
		s.do(err)
		*slot = buf
	}
	return *slot
}

// view is the package function view with the error recorded in s.
func (s *step) view(buf backend.Buffer, off, n int) backend.Buffer {
	if !s.ok() {
		return nil
	}
	v, err := view(buf, off, n)
	s.do(err)
	return v
}

// block returns block r (its rows of width columns) of an N-row matrix.
func (w *worker) block(s *step, all backend.Buffer, r, width int) backend.Buffer {
	lo, _ := w.lay.Range(r)
	return s.view(all, lo*width, w.lay.Size(r)*width)
}

// relDiff returns ||fresh - cached||_F / ||cached||_F, given
// ||cached||_F^2 (MaxFloat32 when cached is zero and fresh is not).
func (w *worker) relDiff(s *step, fresh, cached backend.Buffer, cachedNormSq float64) float64 {
	sum := w.relDiffSq(s, fresh, cached)
	if !s.ok() {
		return 0
	}
	if cachedNormSq == 0 {
		if sum == 0 {
			return 0
		}
		return math.MaxFloat32
	}
	return math.Sqrt(sum / cachedNormSq)
}

// sumSq returns the sum of squares of x, using tmp (same length, may be
// x itself) as scratch.
func (w *worker) sumSq(s *step, tmp, x backend.Buffer) float64 {
	if !s.ok() {
		return 0
	}
	s.do(w.b.Mul(tmp, x, x))
	if !s.ok() {
		return 0
	}
	v, err := w.b.Sum(tmp)
	s.do(err)
	return v
}

// exchange fills the other devices' blocks of xall, the N x width payload
// matrix of layer l, from its owners, and this device's block with its
// fresh payload. clean is the dropout-free payload the staleness policy
// measures drift on (payload itself without dropout).
//
// In training mode the owner of each block applies the staleness policy
// and all devices learn the decisions from one all-gather of (flag,
// drift) pairs; then the blocks that are sent are broadcast (a skipped
// block keeps the copy every device already holds). In evaluation mode
// every block is sent and xall is a temporary.
//
// The blocks travel through dc when the devices have a device
// communicator (one all-gather-v straight into xall when every block is
// sent, else one broadcast per sending owner), else through host memory
// over c.
//
// redraw is non-nil when the payload is constant up to dropout (the input
// features, unprojected) and staleness is on: such a block is sent once,
// dropout-free, and every epoch the receivers apply its owner's dropout
// mask to their copy themselves (redraw(dst, copy, owner)), so skipping it
// is exact and needs no epoch bound (Sancus caches the input features the
// same way).
func (w *worker) exchange(s *step, l int, xall, payload, clean backend.Buffer, train bool, epsScale float64,
	redraw func(dst, src backend.Buffer, r int)) {
	if w.p == 1 || !s.ok() {
		return
	}
	width := w.specs[l].width
	d := w.rank
	if redraw != nil && (train || w.st[l].xconst != nil) {
		w.exchangeConst(s, l, xall, payload, clean, train, redraw)
		return
	}
	h := w.haloFor(l, train)
	if !train {
		sends := make([]bool, w.p)
		for r := range sends {
			sends[r] = true
			if h != nil {
				w.stats.EvalBytes += w.haloBytes(h, r, width)
			} else {
				w.stats.EvalBytes += 4 * int64(w.lay.Size(r)*width) * int64(w.p-1)
			}
		}
		w.send(s, h, xall, payload, width, sends)
		return
	}

	st := w.st[l]
	pol := w.cfg.Staleness
	send := true
	drift := -1.0
	bound := pol.Epsilon * epsScale
	if pol.Enabled && st.valid {
		if pol.Drift == DriftParams {
			drift = w.paramDrift(s, l)
		} else {
			drift = w.relDiff(s, clean, st.clean, st.normSq)
		}
		send = !(st.age[d]+1 <= pol.EpochBound && drift <= bound)
	}
	if !s.ok() {
		return
	}
	flags := make([]int32, 2*w.p)
	for r := 0; r < w.p; r++ {
		flags[2*r], flags[2*r+1] = 1, int32(math.Float32bits(float32(drift)))
	}
	if pol.Enabled {
		mine := []int32{0, int32(math.Float32bits(float32(drift)))}
		if send {
			mine[0] = 1
		}
		s.do(w.c.AllGather(w.ctx, cpu.WrapI32(flags), cpu.WrapI32(mine)))
		w.stats.FlagBytes += 8 * int64(w.p-1)
		if !s.ok() {
			return
		}
	}
	sends := make([]bool, w.p)
	for r := range sends {
		sends[r] = flags[2*r] == 1
	}
	w.send(s, h, xall, payload, width, sends)
	if !s.ok() {
		return
	}
	size := w.lay.Size(d) * width
	if sends[d] && pol.Enabled && pol.Drift == DriftParams {
		w.snapParams(s, l)
	} else if sends[d] && pol.Enabled {
		cs := w.persistent(s, &st.clean, size)
		if s.ok() {
			s.do(w.b.Copy(cs, clean))
		}
		tmp := s.f32(size)
		st.normSq = w.sumSq(s, tmp, clean)
		s.drop(tmp)
	}
	for r := 0; r < w.p; r++ {
		if sends[r] {
			st.age[r] = 0
		} else {
			st.age[r]++
		}
		rd := float64(math.Float32frombits(uint32(flags[2*r+1])))
		w.recordBlock(l, r, w.event(h, r, width, blockEvent{sent: sends[r], age: st.age[r], drift: rd}))
	}
	st.valid = true
}

// exchangeConst is exchange for a constant payload (see redraw there):
// in the first training epoch every owner sends its dropout-free block
// into every device's xconst; afterwards nothing is sent. xall's blocks
// are then the owners' blocks with their dropout masks, drawn here (in
// evaluation, without dropout: the copies themselves), equal to what the
// owners computed, so the layer is exact.
func (w *worker) exchangeConst(s *step, l int, xall, payload, clean backend.Buffer, train bool,
	redraw func(dst, src backend.Buffer, r int)) {
	width := w.specs[l].width
	d := w.rank
	st := w.st[l]
	first := st.xconst == nil
	xc := w.persistent(s, &st.xconst, w.lay.N*width)
	if !s.ok() {
		return
	}
	sends := make([]bool, w.p)
	for r := range sends {
		sends[r] = first
	}
	h := w.halo[haloAll] // the copies serve evaluation too: every row read
	if first {
		w.send(s, h, xc, clean, width, sends)
	}
	if s.ok() {
		s.do(w.b.Copy(w.block(s, xall, d, width), payload))
	}
	for r := 0; r < w.p && s.ok(); r++ {
		if r == d {
			continue
		}
		dst, src := w.block(s, xall, r, width), w.block(s, xc, r, width)
		if train {
			redraw(dst, src, r)
		} else if s.ok() {
			s.do(w.b.Copy(dst, src))
		}
	}
	if !train || !s.ok() {
		return
	}
	for r := 0; r < w.p; r++ {
		st.age[r] = 0 // the copies are the current blocks: nothing ages
		w.recordBlock(l, r, w.event(h, r, width, blockEvent{sent: sends[r], age: 0, drift: 0}))
	}
	st.valid = true
}

// layerParams returns the parameters the payload of layer l depends on:
// those of layers 0..l.
func (w *worker) layerParams(l int) []*nn.Param {
	var ps []*nn.Param
	for k := 0; k <= l; k++ {
		sp := &w.specs[k]
		for _, p := range []*nn.Param{sp.w, sp.wn, sp.bias, sp.attnL, sp.attnR} {
			if p != nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// paramDrift returns ||P - S||_F / ||S||_F over the parameters P of
// layers 0..l and their snapshot S (DriftParams). The parameters are the
// same on every device, so every owner finds the same value.
func (w *worker) paramDrift(s *step, l int) float64 {
	st := w.st[l]
	var sum float64
	for i, p := range w.layerParams(l) {
		if i >= len(st.psnap) || !s.ok() {
			return math.MaxFloat32
		}
		sum += w.relDiffSq(s, p.Value, st.psnap[i])
	}
	if st.psnapSq == 0 {
		if sum == 0 {
			return 0
		}
		return math.MaxFloat32
	}
	return math.Sqrt(sum / st.psnapSq)
}

// relDiffSq returns ||a - b||_F^2.
func (w *worker) relDiffSq(s *step, a, b backend.Buffer) float64 {
	tmp := s.f32(a.Len())
	if !s.ok() {
		return 0
	}
	s.do(w.b.Axpby(tmp, 1, a, -1, b))
	v := w.sumSq(s, tmp, tmp)
	s.drop(tmp)
	return v
}

// snapParams records the parameters of layers 0..l (DriftParams).
func (w *worker) snapParams(s *step, l int) {
	st := w.st[l]
	ps := w.layerParams(l)
	if len(st.psnap) != len(ps) {
		st.psnap = make([]backend.Buffer, len(ps))
	}
	st.psnapSq = 0
	for i, p := range ps {
		slot := w.persistent(s, &st.psnap[i], p.Value.Len())
		if !s.ok() {
			return
		}
		s.do(w.b.Copy(slot, p.Value))
		tmp := s.f32(slot.Len())
		st.psnapSq += w.sumSq(s, tmp, slot)
		s.drop(tmp)
	}
}

// event completes ev with the size of block r's broadcast: every row to
// every other device, or with halo exchange (h non-nil) the rows each
// reads.
func (w *worker) event(h *haloSet, r, width int, ev blockEvent) blockEvent {
	ev.rows, ev.width, ev.receives = w.lay.Size(r), width, w.p-1
	if h != nil {
		ev.rows, ev.receives = int(w.haloBytes(h, r, width)/4/int64(width)), 1
	}
	return ev
}

// send is sendHalo with halo exchange (h non-nil), else sendBlocks.
func (w *worker) send(s *step, h *haloSet, xall, payload backend.Buffer, width int, sends []bool) {
	if h != nil {
		w.sendHalo(s, h, xall, payload, width, sends)
	} else {
		w.sendBlocks(s, xall, payload, width, sends)
	}
}

// sendBlocks broadcasts block r of xall from its owner to every device
// for each r with sends[r] (this device's block is payload); every device
// ends with payload in its own block of xall.
func (w *worker) sendBlocks(s *step, xall, payload backend.Buffer, width int, sends []bool) {
	d := w.rank
	own := w.block(s, xall, d, width)
	all := true
	for _, x := range sends {
		all = all && x
	}
	if w.dc != nil && all {
		counts := make([]int, w.p)
		for r := range counts {
			counts[r] = w.lay.Size(r) * width
		}
		if s.ok() {
			s.do(w.dc.AllGatherV(w.ctx, xall, payload, counts))
		}
		return
	}
	if s.ok() {
		s.do(w.b.Copy(own, payload))
	}
	if w.dc != nil {
		for r := 0; r < w.p && s.ok(); r++ {
			if sends[r] {
				s.do(w.dc.Broadcast(w.ctx, w.block(s, xall, r, width), r))
			}
		}
		return
	}
	counts := make([]int, w.p)
	for r := range counts {
		if sends[r] {
			counts[r] = w.lay.Size(r) * width
		}
	}
	var src backend.Buffer
	if sends[d] {
		src = payload
	}
	recv := w.allGatherV(s, src, counts)
	off := 0
	for r := 0; r < w.p && s.ok(); r++ {
		if r != d && counts[r] > 0 {
			s.do(w.b.Upload(w.block(s, xall, r, width), recv[off:off+counts[r]]))
		}
		off += counts[r]
	}
}

// allGatherV stages src (nil for nothing) through host memory and
// gathers counts[r] floats from every rank r, in rank order.
func (w *worker) allGatherV(s *step, src backend.Buffer, counts []int) []float32 {
	if !s.ok() {
		return nil
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	send := grow(&w.hostA, counts[w.rank])
	if src != nil {
		s.do(w.b.Download(send, src))
	}
	recv := grow(&w.hostB, total)
	if s.ok() {
		s.do(w.c.AllGatherV(w.ctx, cpu.WrapF32(recv), cpu.WrapF32(send), counts))
	}
	return recv
}

// recordBlock adds one forward decision to the statistics.
func (w *worker) recordBlock(l, r int, ev blockEvent) {
	bs := &w.stats.Blocks[l*w.p+r]
	bs.record(ev)
	bytes := 4 * int64(ev.rows) * int64(ev.width) * int64(ev.receives)
	w.stats.Broadcasts++
	w.ep.Broadcasts++
	if ev.sent {
		w.stats.BytesSent += bytes
		w.ep.BytesSent += bytes
	} else {
		w.stats.BroadcastsSkipped++
		w.ep.Skipped++
		w.stats.BytesAvoided += bytes
		w.ep.BytesAvoided += bytes
	}
	w.ep.MaxAge = max(w.ep.MaxAge, ev.age)
	if ev.drift >= 0 {
		w.ep.driftSum += finite(ev.drift)
		w.ep.driftN++
	}
}

// contribution writes this device's gradient contribution to block t's
// payload into dst: all rows of its own block for t == rank, else the
// rows Layout.Used[rank][t], packed. It is called only for blocks this
// device reads from (and always for its own).
type contribution func(dst backend.Buffer, t int) error

// transposed is the contribution of GCN and GraphSAGE: A_dt^T g through
// the transposed block restricted to the rows read (w.back), for g the
// gradient of this device's aggregation output, width columns.
func (w *worker) transposed(l int, g backend.Buffer, width int) contribution {
	back := w.back
	if h := w.haloFor(l, true); h != nil && h.back != nil {
		back = h.back // the training nodes' rows only: the others get zero
	}
	return func(dst backend.Buffer, t int) error {
		bm := back[t]
		if t == w.rank {
			bm = w.back[t]
		}
		if bm.a == nil { // own block, no entries
			return w.b.Fill(dst, 0)
		}
		return w.b.SpMM(dst, bm.a, false, g, bm.w, 1, width)
	}
}

// reduce computes dst = sum over devices r of r's contribution to this
// device's payload: its gradient, from every device whose rows aggregate
// it. Device r computes its contribution to each owner d it reads from;
// only the rows of block d that r reads (Layout.Used[r][d]) can be
// non-zero, so r computes and sends just those rows, packed (contrib),
// and d scatter-adds them (one all-to-all-v per layer: a reduce to every
// owner at once, through dc or host memory). The sum is taken in a fixed
// order: d's own contribution, then the others in rank order.
//
// With Staleness.Gradients a sender may skip a contribution that is within
// the bounds of the one it sent last (the flag matrix is all-gathered, so
// the owner knows); the owner then reuses its copy.
func (w *worker) reduce(s *step, l int, dst backend.Buffer, contrib contribution) {
	if !s.ok() {
		return
	}
	width := w.specs[l].width
	d, p := w.rank, w.p
	s.do(contrib(dst, d))
	if p == 1 || !s.ok() {
		return
	}
	st := w.st[l]
	pol := w.cfg.Staleness
	gstale := pol.Enabled && pol.Gradients
	used := func(r, t int) int { return len(w.lay.Used[r][t]) * width }
	recvIdx := w.recvIdx
	if h := w.haloFor(l, true); h != nil && h.back != nil {
		// Halo exchange, last layer: the output gradient is zero but on
		// training nodes, so only the rows they read get a contribution.
		used = func(r, t int) int { return h.n(r, t) * width }
		recvIdx = h.to
	}
	// Packed contributions to every other owner this device reads from;
	// on the device path without gradient skipping they are computed
	// straight into the send buffer.
	bufs := make([]backend.Buffer, p)
	var packed backend.Buffer
	if w.dc != nil && !gstale {
		total := 0
		for t := 0; t < p; t++ {
			if t != d && used(d, t) > 0 {
				total += used(d, t)
			}
		}
		packed = s.f32(max(total, 1))
	}
	sendFlags := make([]int32, p) // 1: this device sends to owner t
	off := 0
	for t := 0; t < p; t++ {
		if t == d || used(d, t) == 0 || !s.ok() {
			continue
		}
		if packed != nil {
			bufs[t] = s.view(packed, off, used(d, t))
			off += used(d, t)
		} else {
			bufs[t] = s.f32(used(d, t))
		}
		if !s.ok() {
			return
		}
		s.do(contrib(bufs[t], t))
		sendFlags[t] = 1
		if gstale && st.gvalid {
			drift := w.relDiff(s, bufs[t], st.gsent[t], st.gsentNorm[t])
			if st.gage[t]+1 <= pol.EpochBound && drift <= pol.Epsilon*w.epsScale {
				sendFlags[t] = 0
			}
		}
	}
	if !s.ok() {
		return
	}
	// Who sends to whom: flags[r*p+t].
	flags := make([]int32, p*p)
	if gstale {
		s.do(w.c.AllGather(w.ctx, cpu.WrapI32(flags), cpu.WrapI32(sendFlags)))
		w.stats.FlagBytes += 4 * int64(p) * int64(p-1)
		if !s.ok() {
			return
		}
	} else {
		for r := 0; r < p; r++ {
			for t := 0; t < p; t++ {
				if r != t && used(r, t) > 0 {
					flags[r*p+t] = 1
				}
			}
		}
	}
	sendCounts, recvCounts := make([]int, p), make([]int, p)
	sendTotal, recvTotal := 0, 0
	for t := 0; t < p; t++ {
		if t == d {
			continue
		}
		if flags[d*p+t] == 1 {
			sendCounts[t] = used(d, t)
			sendTotal += sendCounts[t]
		}
		if flags[t*p+d] == 1 {
			recvCounts[t] = used(t, d)
			recvTotal += recvCounts[t]
		}
	}
	// part(r) returns the received contribution of device r.
	var part func(r, off, n int) backend.Buffer
	if w.dc != nil {
		if packed == nil { // gradient skipping: pack what is sent
			packed = s.f32(max(sendTotal, 1))
			off := 0
			for t := 0; t < p && s.ok(); t++ {
				if sendCounts[t] > 0 {
					s.do(w.b.Copy(s.view(packed, off, sendCounts[t]), bufs[t]))
					off += sendCounts[t]
				}
			}
		}
		recv := s.f32(max(recvTotal, 1))
		if s.ok() {
			s.do(w.dc.AllToAllV(w.ctx, s.view(recv, 0, recvTotal), recvCounts, s.view(packed, 0, sendTotal), sendCounts))
		}
		part = func(_, off, n int) backend.Buffer { return s.view(recv, off, n) }
	} else {
		send, recv := grow(&w.hostA, sendTotal), grow(&w.hostB, recvTotal)
		off := 0
		for t := 0; t < p && s.ok(); t++ {
			if sendCounts[t] > 0 {
				s.do(w.b.Download(send[off:off+sendCounts[t]], bufs[t]))
				off += sendCounts[t]
			}
		}
		if s.ok() {
			s.do(w.c.AllToAllV(w.ctx, cpu.WrapF32(recv), recvCounts, cpu.WrapF32(send), sendCounts))
		}
		part = func(_, off, n int) backend.Buffer {
			c := s.f32(n)
			if s.ok() {
				s.do(w.b.Upload(c, recv[off:off+n]))
			}
			return c
		}
	}
	if !s.ok() {
		return
	}
	// Statistics, from the global flag matrix (identical everywhere).
	for r := 0; r < p; r++ {
		for t := 0; t < p; t++ {
			if r == t || used(r, t) == 0 {
				continue
			}
			bytes := 4 * int64(used(r, t))
			w.stats.GradMessages++
			if flags[r*p+t] == 1 {
				w.stats.GradBytesSent += bytes
				w.ep.GradBytesSent += bytes
			} else {
				w.stats.GradSkipped++
				w.stats.GradBytesAvoided += bytes
				w.ep.GradBytesAvoided += bytes
			}
		}
	}
	// Sender side: remember what was sent.
	if gstale {
		for t := 0; t < p; t++ {
			if bufs[t] == nil {
				continue
			}
			if flags[d*p+t] == 1 {
				slot := w.persistent(s, &st.gsent[t], bufs[t].Len())
				if s.ok() {
					s.do(w.b.Copy(slot, bufs[t]))
					tmp := s.f32(slot.Len())
					st.gsentNorm[t] = w.sumSq(s, tmp, slot)
					s.drop(tmp)
				}
				st.gage[t] = 0
			} else {
				st.gage[t]++
			}
		}
		st.gvalid = true
	}
	// Owner side: add the contributions in rank order.
	off = 0
	for r := 0; r < p && s.ok(); r++ {
		if r == d || used(r, d) == 0 {
			continue
		}
		var c backend.Buffer
		if n := recvCounts[r]; n > 0 {
			c = part(r, off, n)
			off += n
			if gstale {
				slot := w.persistent(s, &st.grecv[r], n)
				if s.ok() {
					s.do(w.b.Copy(slot, c))
				}
				c = slot
			}
		} else { // skipped: reuse the last contribution received from r
			c = st.grecv[r]
		}
		if s.ok() {
			s.do(w.b.ScatterAddRows(dst, c, recvIdx[r], w.n, width))
		}
	}
}
