package csp

import (
	"context"
	"fmt"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// tagWalk is package sample's domain tag for random walks: walk i of a
// batch uses the stream rng.Derive(rng.Derive(seed, tagWalk, epoch,
// batch), i), one draw per step (TestWalkProtocolMatchesCPU compares the
// walks with sample.RandomWalk's).
const tagWalk = 0x57414c4b00

// maxWalkLength bounds Walker's length, as in package csp.
const maxWalkLength = 1 << 16

// walkHops is the hops word of a walk's headers (no sampler uses it).
const walkHops = -2

// Walker records: origin rank, walk index, stream key, node (walk.cu's
// WK_WORDS), and traces: walk index, step, node.
const (
	walkWords  = 4
	traceWords = 3
)

// WalkMachine is what the walk protocol needs from one rank's device:
// the node-wise machine's buffers and routing, and the kernels of
// walk.cu. As in machine, every method but read queues work and returns.
type WalkMachine interface {
	Machine

	// RouteOrigins is Route with key 0 and the identity offsets 0..P:
	// F holds ranks (the traces' origins), -1 for none.
	RouteOrigins(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, hop, fanout, hops int) error
	// InitWalks writes the n walks' slots: starts, then -1.
	InitWalks(out, starts backend.Buffer, n int64, L int) error
	// Pack gathers n records of w int64: dst[j] = src[pos[j]].
	Pack(dst, src, pos backend.Buffer, n int64, w int) error
	// Step takes step t of the R walkers recv holds (this rank owns
	// their nodes): the walkers that go on into rec and F (-1 where
	// none), the traces into trO (origin, -1 where none) and trR.
	// Walkers this rank may not step add to bad[0].
	Step(t int, recv backend.Buffer, R int64, rec, F, trO, trR, bad backend.Buffer) error
	// Concat copies srcs[i][0:n[i]] one after another into dst.
	Concat(dst backend.Buffer, srcs []backend.Buffer, n []int64) error
	// Scatter writes the m traces recv holds into the n walks' slots;
	// invalid ones add to bad[0].
	Scatter(out, recv backend.Buffer, m, n int64, L int, bad backend.Buffer) error
}

// wproto is one rank's side of the walk protocol (see the package doc).
type wproto struct {
	*proto
	wm     WalkMachine
	length int
	bad    backend.Buffer // int64: walkers or traces this rank could not take
}

// walk draws one walk of length steps from every start: it returns the
// walks' slots (int32, len(starts)*(length+1), on the device); on failure
// everything is freed.
func (wp *wproto) walk(ctx context.Context, starts []graph.NodeID, key sample.Key) (_ backend.Buffer, err error) {
	p, wm, L := wp.proto, wp.wm, wp.length
	P, m := p.size, p.m
	cl := ctlLayout{P}
	n := int64(len(starts))
	var status int64
	var carried error
	if n*int64(L+1) > maxEntries {
		status, carried = stTooLarge, p.errf(0, ErrTooLarge, "%d walks of %d nodes", n, L+1)
	}
	for i, v := range starts {
		if status == stOK && (v < 0 || int64(v) >= p.n) {
			status, carried = stInput, p.errf(0, ErrInput, "start %d: node %d not in [0, %d)", i, v, p.n)
		}
	}
	// Buffers that outlive a step: the walks, the walkers held, the
	// traces kept here.
	var out, F, rec backend.Buffer
	var trO, trR []backend.Buffer
	var trN []int64
	freeAll := func(bs ...backend.Buffer) {
		for _, b := range bs {
			if b != nil {
				m.Free(b)
			}
		}
	}
	defer func() {
		freeAll(F, rec)
		freeAll(trO...)
		freeAll(trR...)
		if err != nil {
			freeAll(out)
		}
	}()
	if status == stOK {
		err := func() error {
			var err error
			if out, err = p.alloc(nil, backend.Int32, n*int64(L+1)); err != nil {
				return err
			}
			if F, err = p.alloc(nil, backend.Int32, n); err != nil {
				return err
			}
			if rec, err = p.alloc(nil, backend.Int64, walkWords*n); err != nil {
				return err
			}
			if err := m.Upload(F, starts); err != nil {
				return err
			}
			bk := rng.Derive(key.Seed, tagWalk, uint64(key.Epoch), uint64(key.Batch))
			r := make([]int64, 0, walkWords*n)
			for i, v := range starts {
				r = append(r, int64(p.rank), int64(i), int64(rng.Derive(bk, uint64(i))), int64(v))
			}
			if err := m.Upload(rec, r); err != nil {
				return err
			}
			if err := m.Upload(wp.bad, []int64{0}); err != nil {
				return err
			}
			if err := m.Upload(m.View(p.ctl, cl.nSeeds(), 1), []int64{n}); err != nil {
				return err
			}
			return wm.InitWalks(out, F, n, L)
		}()
		if err != nil {
			status, carried = stFailed, p.wrapErr(0, "uploading the starts", err)
		}
	}
	nFB := m.View(p.ctl, cl.nSeeds(), 1)
	fcap := n
	for s := 0; s < max(L, 1); s++ {
		var tmp []backend.Buffer
		pl, pos, err := wp.header(ctx, s, F, nFB, fcap, status, carried, false, &tmp)
		if err != nil {
			freeAll(tmp...)
			return nil, err
		}
		p.stats.Frontier[s] += pl.nF - pl.dead
		if L == 0 {
			freeAll(tmp...)
			p.stats.Batches++
			return out, nil
		}
		// The walkers go to the owners of their nodes.
		live, R := pl.nF-pl.dead, pl.R
		if walkWords*max(live, R) > maxEntries {
			freeAll(tmp...)
			return nil, p.errf(s, ErrTooLarge, "%d walkers received, %d sent", R, live)
		}
		send, err := p.alloc(&tmp, backend.Int64, walkWords*live)
		if err == nil {
			err = wm.Pack(send, rec, pos, live, walkWords)
		}
		var recv backend.Buffer
		if err == nil {
			recv, err = p.alloc(&tmp, backend.Int64, walkWords*R)
		}
		if err != nil {
			freeAll(tmp...)
			return nil, p.wrapErr(s, "packing the walkers", err)
		}
		if err := p.a2av(ctx, m.View(recv, 0, walkWords*R), scale(ints(pl.recvN), walkWords), m.View(send, 0, walkWords*live), scale(ints(pl.sendN), walkWords), 8); err != nil {
			freeAll(tmp...)
			return nil, p.wrapErr(s, "walker exchange", err)
		}
		freeAll(F, rec)
		F, rec = nil, nil
		// Step; a failure from here on reaches the peers in the next
		// header.
		err = func() error {
			var o, r backend.Buffer
			var err error
			if F, err = p.alloc(nil, backend.Int32, R); err != nil {
				return err
			}
			if rec, err = p.alloc(nil, backend.Int64, walkWords*R); err != nil {
				return err
			}
			if o, err = p.alloc(nil, backend.Int32, R); err != nil {
				return err
			}
			trO = append(trO, o)
			if r, err = p.alloc(nil, backend.Int64, traceWords*R); err != nil {
				return err
			}
			trR, trN = append(trR, r), append(trN, R)
			if err := wm.Step(s, recv, R, rec, F, o, r, wp.bad); err != nil {
				return err
			}
			return m.Upload(nFB, []int64{R})
		}()
		freeAll(tmp...)
		if err != nil {
			status, carried = stFailed, p.wrapErr(s, "stepping", err)
		}
		fcap = R
	}

	// Walkers a rank could not step fail every rank: the count travels
	// in the traces' header.
	if status == stOK {
		bad, err := p.read([]backend.Buffer{wp.bad}, []int64{1})
		switch {
		case err != nil:
			status, carried = stFailed, p.wrapErr(L, "reading the violation counter", err)
		case bad[0] != 0:
			status, carried = stFailed, p.errf(L, ErrProtocol, "%d walkers that were not this rank's to step", bad[0])
		}
	}

	// The traces go home: routed by origin, exchanged, written into the
	// walks' slots.
	var T int64
	for _, k := range trN {
		T += k
	}
	var tO, tR backend.Buffer
	if status == stOK && traceWords*T > maxEntries {
		status, carried = stTooLarge, p.errf(L, ErrTooLarge, "%d steps taken here", T)
	}
	if status == stOK {
		err := func() error {
			var err error
			if tO, err = p.alloc(nil, backend.Int32, T); err != nil {
				return err
			}
			if tR, err = p.alloc(nil, backend.Int64, traceWords*T); err != nil {
				return err
			}
			if err := wm.Concat(tO, trO, trN); err != nil {
				return err
			}
			if err := wm.Concat(tR, trR, scale64(trN, traceWords)); err != nil {
				return err
			}
			return m.Upload(nFB, []int64{T})
		}()
		if err != nil {
			status, carried = stFailed, p.wrapErr(L, "gathering the traces", err)
		}
	}
	defer freeAll(tO, tR)
	var tmp []backend.Buffer
	defer func() { freeAll(tmp...) }()
	pl, pos, err := wp.header(ctx, L, tO, nFB, T, status, carried, true, &tmp)
	if err != nil {
		return nil, err
	}
	live, R := pl.nF-pl.dead, pl.R
	send, err := p.alloc(&tmp, backend.Int64, traceWords*live)
	if err == nil {
		err = wm.Pack(send, tR, pos, live, traceWords)
	}
	var recv backend.Buffer
	if err == nil && traceWords*R > maxEntries {
		err = fmt.Errorf("%w: %d traces received", ErrTooLarge, R)
	}
	if err == nil {
		recv, err = p.alloc(&tmp, backend.Int64, traceWords*R)
	}
	if err != nil {
		return nil, p.wrapErr(L, "packing the traces", err)
	}
	if err := p.a2av(ctx, m.View(recv, 0, traceWords*R), scale(ints(pl.recvN), traceWords), m.View(send, 0, traceWords*live), scale(ints(pl.sendN), traceWords), 8); err != nil {
		return nil, p.wrapErr(L, "trace exchange", err)
	}
	if err := wm.Scatter(out, recv, R, n, L, wp.bad); err != nil {
		return nil, p.wrapErr(L, "writing the walks", err)
	}
	bad, err := p.read([]backend.Buffer{wp.bad}, []int64{1})
	if err != nil {
		return nil, p.wrapErr(L, "reading the violation counter", err)
	}
	if bad[0] != 0 {
		return nil, p.errf(L, ErrProtocol, "%d traces that were not this rank's to take", bad[0])
	}
	p.stats.Batches++
	return out, nil
}

// header routes the items F (nFB[0] of them on the device, at most
// fcap; walkers' nodes, or with origins the traces' origin ranks) and
// exchanges and checks the header of hop (a step, or the traces at
// Length). It returns the routing's positions (grouped item j is item
// pos[j]) and appends its buffers to tmp. A failing status takes part in
// the exchange, then returns carried.
func (wp *wproto) header(ctx context.Context, hop int, F, nFB backend.Buffer, fcap, status int64, carried error, origins bool, tmp *[]backend.Buffer) (*walkPlan, backend.Buffer, error) {
	p, m := wp.proto, wp.m
	var pos backend.Buffer
	sent, recv, err := p.exchangeHeader(ctx, hop, status, carried, func(st int64) []int64 { return makeHeader(p.size, st, 0, hop, wp.length, walkHops) },
		func(sendH, ctr backend.Buffer) error {
			sendIDs, err := p.alloc(tmp, backend.Int32, fcap)
			if err != nil {
				return err
			}
			if pos, err = p.alloc(tmp, backend.Int32, fcap); err != nil {
				return err
			}
			if origins {
				return wp.wm.RouteOrigins(sendH, sendIDs, pos, F, nFB, ctr, fcap, hop, wp.length, walkHops)
			}
			return m.Route(sendH, sendIDs, pos, F, nFB, ctr, fcap, 0, hop, wp.length, walkHops)
		})
	if err != nil {
		return nil, nil, err
	}
	pl := &walkPlan{plan: plan{P: p.size, rank: p.rank}}
	if kind, msg := pl.read(recv, sent, hop, wp.length, fcap); kind != nil {
		return nil, nil, p.errf(hop, kind, "%s", msg)
	}
	return pl, pos, nil
}

// walkPlan is a walk header's sizes: plan's, with nF the items routed
// (live and dead) and dead those routed nowhere.
type walkPlan struct {
	plan
	dead int64
}

// read checks a walk header this rank received (recv) and sent (sent) at
// hop of a walk of length L, for at most fcap items, and fills the plan.
// Unlike a sampler's, a walk's header may bring more items than this
// rank has rows (walkers meet), and items routed nowhere are dead
// walkers or steps without a trace.
func (pl *walkPlan) read(recv, sent []int64, hop, L int, fcap int64) (kind error, msg string) {
	P, W := pl.P, HeaderWords
	if len(recv) != P*W || len(sent) != P*W {
		return ErrProtocol, fmt.Sprintf("header of %d/%d words, want %d", len(recv), len(sent), P*W)
	}
	if p, st := peerFailed(recv, P, W, hStatus, pl.rank); p >= 0 {
		return ErrPeer, fmt.Sprintf("rank %d: %s", p, statusText(st))
	}
	pl.sendN, pl.recvN, pl.roff = make([]int64, P), make([]int64, P), make([]int64, P+1)
	nF, dead := sent[hNF], sent[hBad]
	if nF < 0 || nF > fcap || dead < 0 || dead > nF {
		return ErrProtocol, fmt.Sprintf("%d items (%d routed nowhere), at most %d expected", nF, dead, fcap)
	}
	sum := dead
	for p := range P {
		row := recv[p*W : (p+1)*W]
		if row[hHop] != int64(hop) || row[hFanout] != int64(L) || row[hHops] != walkHops {
			return ErrProtocol, fmt.Sprintf("rank %d is at step %d of a walk of %d (hops word %d), this rank at step %d of %d",
				p, row[hHop], row[hFanout], row[hHops], hop, L)
		}
		c := row[hCount]
		if c < 0 || c > row[hNF] {
			return ErrProtocol, fmt.Sprintf("rank %d sends %d of its %d items", p, c, row[hNF])
		}
		pl.recvN[p] = c
		pl.roff[p+1] = pl.roff[p] + c
		s := sent[p*W+hCount]
		if s < 0 || s > nF || sent[p*W+hNF] != nF {
			return ErrProtocol, fmt.Sprintf("%d items for rank %d out of %d", s, p, nF)
		}
		pl.sendN[p] = s
		sum += s
	}
	if sum != nF {
		return ErrProtocol, fmt.Sprintf("%d items but %d routed", nF, sum)
	}
	pl.nF, pl.dead, pl.R = nF, dead, pl.roff[P]
	if pl.R > maxEntries {
		return ErrTooLarge, fmt.Sprintf("%d items received", pl.R)
	}
	return nil, ""
}

func scale64(x []int64, k int64) []int64 {
	out := make([]int64, len(x))
	for i, v := range x {
		out[i] = v * k
	}
	return out
}

// checkWalkLength checks a walk length as csp.NewWalker does.
func checkWalkLength(L int) error {
	if L < 0 || L > maxWalkLength {
		return fmt.Errorf("length %d not in [0, %d]", L, maxWalkLength)
	}
	return nil
}
