package csp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// proto is one rank's side of the collective protocol over a machine
// and an exchanger (see the package doc). It knows nothing of CUDA: CPU
// devices run it on the CPU machine.
type proto struct {
	m          Machine
	x          exchanger
	remote     bool // x is a communicator: count its exchanges (and their waits)
	rank, size int
	n          int64   // nodes
	off        []int64 // partition offsets (P+1)
	rows       int64   // rows this rank owns
	fan        []int
	edgeIDs    bool
	ctl        backend.Buffer // ctlLayout
	stats      *Stats
	hb         []int64 // host words of the last read
}

// HopOut is one hop's block parts, as the protocol hands them to
// Machine.Batch: NumDst destinations (the hop's frontier), SrcNodes
// (NumSrc, the next hop's frontier), the CSR rows Indptr and Indices
// (block-local columns) and the global EdgeIDs (NumEdges each); NumSrc
// and NumEdges are known after the step's final read.
type HopOut struct {
	NumDst, NumSrc, NumEdges int64
	ecap                     int64 // entries of Indices and EdgeIDs
	Indptr, Indices          backend.Buffer
	SrcNodes                 backend.Buffer
	EdgeIDs                  backend.Buffer
	Sizes                    backend.Buffer // {NumDst, NumEdges, NumSrc} on the device
}

// Free returns the parts' buffers to m.
func (o *HopOut) Free(m Machine) {
	for _, b := range []backend.Buffer{o.Indptr, o.Indices, o.SrcNodes, o.EdgeIDs, o.Sizes} {
		if b != nil {
			m.Free(b)
		}
	}
	*o = HopOut{}
}

// carry marks a failure in a hop's tail (after its last exchange): the
// next hop's header reports it to the peers.
type carry struct{ err error }

func (c *carry) Error() string { return c.err.Error() }
func (c *carry) Unwrap() error { return c.err }

func (p *proto) errf(hop int, kind error, format string, args ...any) *Error {
	return &Error{Rank: p.rank, Op: "csp.Sample", Hop: hop, Msg: fmt.Sprintf(format, args...), Err: kind}
}

func (p *proto) wrapErr(hop int, what string, err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	return &Error{Rank: p.rank, Op: "csp.Sample", Hop: hop, Msg: what, Err: err}
}

// count adds an exchange that started at t to the stats: send[p]
// elements of size es to rank p. A communicator's collective returns
// when the device has run it: a host wait.
func (p *proto) count(send []int, es int, t time.Time) {
	if !p.remote {
		return
	}
	p.stats.Exchanges++
	p.stats.Waits++
	p.stats.WaitTime += time.Since(t)
	for q, n := range send {
		if q == p.rank {
			p.stats.BytesLocal += int64(n * es)
		} else {
			p.stats.BytesSent[q] += int64(n * es)
		}
	}
}

// a2a is an all-to-all of equal blocks of w elements of size es, counted.
func (p *proto) a2a(ctx context.Context, dst, src backend.Buffer, w, es int) error {
	t := time.Now()
	if err := p.x.AllToAll(ctx, dst, src); err != nil {
		return err
	}
	p.count(fill(p.size, w), es, t)
	return nil
}

// a2av is an all-to-all-v of elements of size es, counted.
func (p *proto) a2av(ctx context.Context, dst backend.Buffer, recv []int, src backend.Buffer, send []int, es int) error {
	t := time.Now()
	if err := p.x.AllToAllV(ctx, dst, recv, src, send); err != nil {
		return err
	}
	p.count(send, es, t)
	return nil
}

// read is machine.read counted as a wait; the words land in p.hb.
func (p *proto) read(srcs []backend.Buffer, n []int64) ([]int64, error) {
	var total int64
	for _, k := range n {
		total += k
	}
	if int64(cap(p.hb)) < total {
		p.hb = make([]int64, total)
	}
	p.hb = p.hb[:total]
	p.stats.Waits++
	t := time.Now()
	err := p.m.Read(p.hb, srcs, n)
	p.stats.WaitTime += time.Since(t)
	if err != nil {
		return nil, err
	}
	return p.hb, nil
}

// alloc checks n against maxEntries and records the buffer in tmp.
func (p *proto) alloc(tmp *[]backend.Buffer, dt backend.DType, n int64) (backend.Buffer, error) {
	if n < 0 || n > maxEntries {
		return nil, fmt.Errorf("%w: a buffer of %d entries", ErrTooLarge, n)
	}
	b, err := p.m.Alloc(dt, n)
	if err != nil {
		return nil, err
	}
	if tmp != nil {
		*tmp = append(*tmp, b)
	}
	return b, nil
}

func fill(P, v int) []int {
	out := make([]int, P)
	for i := range out {
		out[i] = v
	}
	return out
}

// sampleBatch runs step (a protocol's sample) and hands its parts to
// the machine as a Batch.
func (p *proto) sampleBatch(ctx context.Context, seeds []graph.NodeID, key sample.Key, step func(context.Context, []graph.NodeID, sample.Key) ([]HopOut, error)) (*Batch, error) {
	outs, err := step(ctx, seeds, key)
	if err != nil {
		return nil, err
	}
	b, err := p.m.Batch(outs, seeds)
	if err != nil {
		return nil, p.wrapErr(len(outs)-1, "building the blocks", err)
	}
	return b, nil
}

// setMachine gives p its machine and control words.
func (p *proto) setMachine(m Machine) error {
	p.m = m
	var err error
	p.ctl, err = m.Alloc(backend.Int64, ctlLayout{p.size}.words())
	return err
}

// close frees the control words and the extra buffers (a protocol's
// own), then the machine's memory; p may be nil (a sampler that failed
// before its protocol).
func (p *proto) close(extra ...backend.Buffer) error {
	if p == nil || p.m == nil {
		return nil
	}
	for _, b := range append([]backend.Buffer{p.ctl}, extra...) {
		if b != nil {
			p.m.Free(b)
		}
	}
	return p.m.Close()
}

// sample runs one step: every hop, then one read of all hops' sizes. On
// success the caller owns the returned parts; on failure they are freed.
func (p *proto) sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) ([]HopOut, error) {
	return p.step(ctx, seeds, key, stepSpec{hop: p.hop})
}

// stepSpec is what a protocol's step adds to proto.step: its hop, and
// device words read with the blocks' sizes (and checked) at the end.
type stepSpec struct {
	hop func(ctx context.Context, h int, F, nFB backend.Buffer, fcap int64, status int64, carried error, key sample.Key, out *HopOut, nFOut *int64) (next int64, err error)
	// exactEdges: a hop's edge count is its bound (else at most it).
	exactEdges bool
	// extra (extraWords words, zeroed before the first hop) is read
	// with the sizes and checked by check.
	extra      backend.Buffer
	extraWords int64
	check      func(words []int64) error
}

// step runs every hop of a step with spec's hop, then one read of all
// hops' sizes (and spec's extra words). On success the caller owns the
// returned parts; on failure they are freed.
func (p *proto) step(ctx context.Context, seeds []graph.NodeID, key sample.Key, spec stepSpec) (_ []HopOut, err error) {
	L := len(p.fan)
	outs := make([]HopOut, L)
	defer func() {
		if err != nil {
			for i := range outs {
				outs[i].Free(p.m)
			}
		}
	}()
	var status int64
	var carried error
	if err := checkSeeds(seeds, p.n); err != nil {
		status, carried = stInput, p.errf(0, ErrInput, "%v", err)
	}
	cl := ctlLayout{p.size}
	nF0 := int64(len(seeds))
	var F backend.Buffer
	if status == stOK {
		err := func() error {
			var err error
			if F, err = p.alloc(nil, backend.Int32, nF0); err != nil {
				return err
			}
			if err := p.m.Upload(F, seeds); err != nil {
				return err
			}
			if spec.extra != nil {
				if err := p.m.Upload(spec.extra, make([]int64, spec.extraWords)); err != nil {
					return err
				}
			}
			return p.m.Upload(p.m.View(p.ctl, cl.nSeeds(), 1), []int64{nF0})
		}()
		if err != nil {
			status, carried = stFailed, p.wrapErr(0, "uploading the seeds", err)
		}
	}
	if F != nil {
		defer p.m.Free(F)
	}
	nFB, fcap := p.m.View(p.ctl, cl.nSeeds(), 1), nF0
	nF := make([]int64, L) // exact frontier sizes, from the headers
	for h := range L {
		if status != stOK {
			F = nil
		}
		var next int64
		next, err = spec.hop(ctx, h, F, nFB, fcap, status, carried, key, &outs[h], &nF[h])
		if err != nil {
			var c *carry
			if !errors.As(err, &c) {
				return nil, err
			}
			// The tail of this hop failed: tell the peers in the next
			// hop's header (after the last hop there is no next step).
			if h == L-1 {
				return nil, c.err
			}
			status, carried = stFailed, c.err
			continue
		}
		F, nFB, fcap = outs[h].SrcNodes, p.m.View(outs[h].Sizes, 2, 1), next
	}
	// The step's only read of the blocks' sizes.
	srcs, n := make([]backend.Buffer, L, L+1), make([]int64, L, L+1)
	for h := range L {
		srcs[h], n[h] = outs[h].Sizes, 3
	}
	if spec.extra != nil {
		srcs, n = append(srcs, spec.extra), append(n, spec.extraWords)
	}
	sz, err := p.read(srcs, n)
	if err != nil {
		return nil, p.wrapErr(L-1, "reading the block sizes", err)
	}
	for h := range L {
		o := &outs[h]
		nd, e, ns := sz[3*h], sz[3*h+1], sz[3*h+2]
		badE := e < 0 || e > o.ecap
		if spec.exactEdges {
			badE = e != o.ecap
		}
		if nd != o.NumDst || badE || ns < nd || ns > nd+e || (h+1 < L && ns != nF[h+1]) {
			return nil, p.errf(h, ErrProtocol, "device sizes nd=%d E=%d src=%d for a frontier of %d (%d edges drawn)", nd, e, ns, o.NumDst, o.ecap)
		}
		o.NumEdges, o.NumSrc = e, ns
	}
	if spec.check != nil {
		if err := spec.check(sz[3*L:]); err != nil {
			return nil, err
		}
	}
	p.stats.Batches++
	return outs, nil
}

// hop runs hop h for the frontier F (nFB[0] nodes on the device, at most
// fcap) into out and returns the next frontier's bound. status != stOK
// takes part in the header exchange only, then returns carried.
func (p *proto) hop(ctx context.Context, h int, F, nFB backend.Buffer, fcap int64, status int64, carried error, key sample.Key, out *HopOut, nFOut *int64) (next int64, err error) {
	var tmp []backend.Buffer // freed when the hop ends (the device orders reuse)
	defer func() {
		for _, b := range tmp {
			p.m.Free(b)
		}
	}()
	src, err := p.draw(ctx, h, F, nFB, fcap, status, carried, sample.HopKey(key, h), p.fan[h], out, &tmp, &tmp)
	*nFOut = out.NumDst
	if err != nil {
		return 0, err
	}
	// Failures from here on are carried.
	out.SrcNodes, out.Indices, out.Sizes, err = p.m.Relabel(F, out.NumDst, src, out.Indptr, out.ecap)
	if err != nil {
		return 0, &carry{p.wrapErr(h, "assembling the block", err)}
	}
	return out.NumDst + out.ecap, nil
}

// draw is a node-wise hop h at fanout k without its relabeling: it
// routes the frontier F (nFB[0] nodes on the device, at most fcap) to the
// owners, which draw under the hop key hk, and unpacks their answers in
// frontier order: out.NumDst (the frontier's size), out.ecap (the edges'
// bound: nF*k, or exactly the edges at fanout -1), out.Indptr and
// out.EdgeIDs (out's), and src, the edges' global sources (kept in
// keep). Scratch goes to tmp. A typed hop (TypedSampler) runs the same
// steps for all its relations together (typedhop.go), then relabels per
// node type. status != stOK takes part
// in the header exchange only, then returns carried; a failure after
// the last exchange is a *carry.
func (p *proto) draw(ctx context.Context, h int, F, nFB backend.Buffer, fcap int64, status int64, carried error, hk uint64, k int, out *HopOut, tmp, keep *[]backend.Buffer) (src backend.Buffer, err error) {
	m := p.m

	// 1. Shuffle: group the frontier by owner; the header tells every
	// owner how many nodes come (and every failure so far).
	if status == stOK && k > 0 && !stridedCap(fcap, k) {
		status, carried = stTooLarge, p.errf(h, ErrTooLarge, "a frontier of up to %d nodes at fanout %d", fcap, k)
	}
	pl, sendIDs, pos, err := p.shuffle(ctx, h, F, nFB, fcap, status, carried, hk, k, tmp)
	if err != nil {
		return nil, err
	}
	nF := pl.nF
	out.NumDst = nF
	p.stats.Frontier[h] += nF
	recvIDs, err := p.alloc(tmp, backend.Int32, pl.R)
	if err != nil {
		return nil, p.wrapErr(h, "allocating the received frontier", err)
	}
	sendN, recvN := ints(pl.sendN), ints(pl.recvN)
	if err := p.a2av(ctx, m.View(recvIDs, 0, pl.R), recvN, m.View(sendIDs, 0, nF), sendN, 4); err != nil {
		return nil, p.wrapErr(h, "node exchange", err)
	}

	// 2. Sample at the owner, 3. reshuffle the answers.
	var ans, ansE backend.Buffer
	var E int64 // answer entries (a bound for strided hops)
	if k > 0 {
		E, ans, ansE, err = p.strided(ctx, h, k, recvIDs, pl, tmp)
	} else {
		E, ans, ansE, err = p.exact(ctx, h, recvIDs, pl, tmp)
	}
	if err != nil {
		return nil, err
	}

	// The edges, in frontier order: failures from here on are carried.
	out.ecap = E
	err = func() error {
		var err error
		if src, err = p.alloc(keep, backend.Int32, E); err != nil {
			return err
		}
		if out.Indptr, err = p.alloc(nil, backend.Int64, nF+1); err != nil {
			return err
		}
		if out.EdgeIDs, err = p.alloc(nil, backend.Int64, E); err != nil {
			return err
		}
		if k > 0 {
			return m.UnpackStrided(out.Indptr, src, out.EdgeIDs, ans, ansE, pos, nF, k)
		}
		return m.UnpackExact(out.Indptr, src, out.EdgeIDs, ans, ansE, pos, pl.bptr(), pl.S, nF, E)
	}()
	if err != nil {
		return nil, &carry{p.wrapErr(h, "assembling the block", err)}
	}
	return src, nil
}

// shuffle is the first step of a hop: it groups the frontier F (nFB[0]
// nodes on the device, at most fcap) by owner into sendIDs (pos: each
// node's place there), exchanges the header (hop key hk, fanout k, and
// status, the failures so far) and reads it: the plan of the hop's
// exchanges. status != stOK takes part in the header exchange only, then
// returns carried. Buffers go to tmp.
func (p *proto) shuffle(ctx context.Context, h int, F, nFB backend.Buffer, fcap int64, status int64, carried error, hk uint64, k int, tmp *[]backend.Buffer) (pl *plan, sendIDs, pos backend.Buffer, err error) {
	L, m := len(p.fan), p.m
	sent, recv, err := p.exchangeHeader(ctx, h, status, carried, func(st int64) []int64 { return makeHeader(p.size, st, hk, h, k, L) },
		func(sendH, ctr backend.Buffer) error {
			var err error
			if sendIDs, err = p.alloc(tmp, backend.Int32, fcap); err != nil {
				return err
			}
			if pos, err = p.alloc(tmp, backend.Int32, fcap); err != nil {
				return err
			}
			return m.Route(sendH, sendIDs, pos, F, nFB, ctr, fcap, hk, h, k, L)
		})
	if err != nil {
		return nil, nil, nil, err
	}
	pl = &plan{P: p.size, rank: p.rank}
	if kind, msg := pl.readHeader(recv, sent, h, k, L, fcap, p.rows); kind != nil {
		return nil, nil, nil, p.errf(h, kind, "%s", msg)
	}
	return pl, sendIDs, pos, nil
}

// exchangeHeader is the header exchange that starts every hop: with
// status stOK, route groups the hop's items and writes the header into
// sendH (ctr: its counters); a failure there, or a failing status,
// sends failHdr(status) instead. It returns the header words sent and
// received; with a failing status it takes part in the exchange, then
// returns carried.
func (p *proto) exchangeHeader(ctx context.Context, h int, status int64, carried error, failHdr func(status int64) []int64, route func(sendH, ctr backend.Buffer) error) (sent, recv []int64, err error) {
	m, cl := p.m, ctlLayout{p.size}
	sendH, recvH := m.View(p.ctl, cl.sendHdr(), cl.hdrWords()), m.View(p.ctl, cl.recvHdr(), cl.hdrWords())
	if status == stOK {
		if err := route(sendH, m.View(p.ctl, cl.ctr(), int64(2*(p.size+1)))); err != nil {
			status, carried = stFailed, p.wrapErr(h, "routing", err)
		}
	}
	if status != stOK {
		if err := m.Upload(sendH, failHdr(status)); err != nil {
			return nil, nil, carried
		}
	}
	if err := p.a2a(ctx, recvH, sendH, HeaderWords, 8); err != nil {
		return nil, nil, p.wrapErr(h, "header exchange", err)
	}
	hw, err := p.read([]backend.Buffer{p.ctl}, []int64{2 * cl.hdrWords()})
	if err != nil {
		return nil, nil, p.wrapErr(h, "reading the header", err)
	}
	if status != stOK {
		return nil, nil, carried
	}
	W := cl.hdrWords()
	return hw[:W], hw[W : 2*W], nil
}

// strided is the exchange of a hop with fanout k > 0: every node gets k
// answer slots (padded with -1), so the sizes follow from the header.
// It returns the entries of src (a bound: nF*k) and the answers.
func (p *proto) strided(ctx context.Context, h, k int, ids backend.Buffer, pl *plan, tmp *[]backend.Buffer) (E int64, ans, ansE backend.Buffer, err error) {
	m := p.m
	if kind, msg := pl.stridedSizes(k); kind != nil {
		return 0, nil, nil, p.errf(h, kind, "%s", msg)
	}
	RK, FK := pl.R*int64(k), pl.nF*int64(k)
	var out, outE backend.Buffer
	err = func() error {
		var err error
		if out, err = p.alloc(tmp, backend.Int32, RK); err != nil {
			return err
		}
		if outE, err = p.alloc(tmp, backend.Int64, RK); err != nil {
			return err
		}
		if err := m.DrawStrided(h, ids, pl.R, pl.roff, pl.keys, out, outE); err != nil {
			return err
		}
		if ans, err = p.alloc(tmp, backend.Int32, FK); err != nil {
			return err
		}
		if p.edgeIDs {
			if ansE, err = p.alloc(tmp, backend.Int64, FK); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return 0, nil, nil, p.wrapErr(h, "drawing", err)
	}
	send, recv := pl.stridedCounts(k)
	if err := p.a2av(ctx, m.View(ans, 0, FK), recv, m.View(out, 0, RK), send, 4); err != nil {
		return 0, nil, nil, p.wrapErr(h, "answer exchange", err)
	}
	if p.edgeIDs {
		if err := p.a2av(ctx, m.View(ansE, 0, FK), recv, m.View(outE, 0, RK), send, 8); err != nil {
			return 0, nil, nil, p.wrapErr(h, "edge ID exchange", err)
		}
	}
	return FK, ans, ansE, nil
}

// exact is the exchange of a hop that takes every neighbor: the owner
// counts, the ranks agree on per-requester totals (a second status
// exchange), and the answers carry counts and neighbors.
func (p *proto) exact(ctx context.Context, h int, ids backend.Buffer, pl *plan, tmp *[]backend.Buffer) (E int64, ans, ansE backend.Buffer, err error) {
	P, m, cl := p.size, p.m, ctlLayout{p.size}
	var st3 int64
	var err3 error
	qptr, tot, err := m.CountExact(h, ids, pl.R, pl.roff)
	if err != nil {
		st3, err3 = stFailed, p.wrapErr(h, "counting the received nodes", err)
	} else {
		*tmp = append(*tmp, qptr, tot)
		tw, err := p.read([]backend.Buffer{tot}, []int64{int64(P + 1)})
		if err != nil {
			st3, err3 = stFailed, p.wrapErr(h, "reading the totals", err)
		} else if st, msg := pl.ownerTotals(tw[:P], tw[P], -1); st != stOK {
			kind := ErrTooLarge
			if st != stTooLarge {
				kind = ErrProtocol
			}
			st3, err3 = st, p.errf(h, kind, "%s", msg)
		}
	}
	var eid, packed backend.Buffer
	if st3 == stOK {
		// The owner's answer buffers, before the status goes out.
		if eid, err = p.alloc(tmp, backend.Int64, pl.E); err == nil {
			packed, err = p.alloc(tmp, backend.Int32, pl.R+pl.E)
		}
		if err != nil {
			st3, err3 = stFailed, p.wrapErr(h, "allocating the drawn edges", err)
		}
	}
	sendT, recvT := m.View(p.ctl, cl.sendTot(), int64(P*tWords)), m.View(p.ctl, cl.recvTot(), int64(P*tWords))
	if err := m.Upload(sendT, pl.totalsSend(st3)); err != nil {
		if err3 != nil {
			return 0, nil, nil, err3
		}
		return 0, nil, nil, p.wrapErr(h, "preparing the totals", err)
	}
	if err := p.a2a(ctx, recvT, sendT, tWords, 8); err != nil {
		return 0, nil, nil, p.wrapErr(h, "totals exchange", err)
	}
	rt, err := p.read([]backend.Buffer{recvT}, []int64{int64(P * tWords)})
	if err3 != nil {
		return 0, nil, nil, err3
	}
	if err != nil {
		return 0, nil, nil, p.wrapErr(h, "reading the totals", err)
	}
	if kind, msg := pl.readTotals(rt, -1); kind != nil {
		return 0, nil, nil, p.errf(h, kind, "%s", msg)
	}
	ansSend, ansRecv := pl.answerCounts()
	err = func() error {
		if err := m.DrawExact(h, ids, qptr, pl.R, pl.roff, pl.keys, packed, eid, pl.E); err != nil {
			return err
		}
		var err error
		if ans, err = p.alloc(tmp, backend.Int32, pl.nF+pl.Erecv); err != nil {
			return err
		}
		if p.edgeIDs {
			if ansE, err = p.alloc(tmp, backend.Int64, pl.Erecv); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return 0, nil, nil, p.wrapErr(h, "drawing", err)
	}
	if err := p.a2av(ctx, m.View(ans, 0, pl.nF+pl.Erecv), ansRecv, m.View(packed, 0, pl.R+pl.E), ansSend, 4); err != nil {
		return 0, nil, nil, p.wrapErr(h, "answer exchange", err)
	}
	if p.edgeIDs {
		eSend, eRecv := ints(pl.tot), ints(pl.rtot)
		if err := p.a2av(ctx, m.View(ansE, 0, pl.Erecv), eRecv, m.View(eid, 0, pl.E), eSend, 8); err != nil {
			return 0, nil, nil, p.wrapErr(h, "edge ID exchange", err)
		}
	}
	return pl.Erecv, ans, ansE, nil
}
