package csp

import (
	"context"
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// The batched typed hop: every relation drawn at a hop goes through one
// header exchange, one node exchange, (one totals exchange when some
// relation takes every neighbor), one answer exchange (and one edge ID
// exchange), so a hop costs the exchanges of a homogeneous hop whatever
// the number of relations. Each exchange carries, per peer, the
// relations' parts one after another in relation order: the header rows
// (HeaderWords each; tWords for totals) and the all-to-all-v segments.
// Each relation keeps its own machine, routing and plan (the node-wise
// hop's, proto.draw's steps), so the parts are packed from and unpacked
// into the buffers the per-relation exchanges would have used: device
// copies (no host wait), and the kernels run unchanged.

// typedCtl is the layout of the typed sampler's control words (int64,
// on the first relation's machine): the combined headers sent and
// received (P rows of nRel*HeaderWords at most), then the combined
// totals sent and received (P rows of nRel*tWords at most).
type typedCtl struct{ P, nRel int }

func (c typedCtl) hdr(nS int) int64 { return int64(c.P * nS * HeaderWords) } // one direction
func (c typedCtl) tot0() int64      { return 2 * int64(c.P*c.nRel*HeaderWords) }
func (c typedCtl) tot(nX int) int64 { return int64(c.P * nX * tWords) }
func (c typedCtl) words() int64     { return c.tot0() + 2*int64(c.P*c.nRel*tWords) }

// hopRel is one relation's part of a batched hop on this rank.
type hopRel struct {
	r    int
	p    *proto // the relation's protocol (its machine, ctl, rows)
	k    int    // fanout at the hop
	dst  tNodes // frontier of the relation's destination type
	key  uint64 // the relation's stream: the hop key its owners draw with
	F    backend.Buffer
	pl   *plan
	pos  backend.Buffer // frontier position of each routed node
	send backend.Buffer // the routed frontier (grouped by owner)
	recv backend.Buffer // nodes received from the requesters
	// Owner side: strided answers (out, outE); fanout -1: counts (qptr,
	// tot), then packed counts and neighbors (out) and edge IDs (outE).
	out, outE, qptr, tot backend.Buffer
	st3                  int64 // fanout -1: status sent with the totals
	err3                 error
	// Requester side: the answers in grouped order, their entries E.
	ans, ansE backend.Buffer
	E         int64
	g         *tRel
}

// hopScratch is a hop's scratch: buffers and the machines that made
// them, freed when the hop ends (the device orders reuse).
type hopScratch []owned

func (s *hopScratch) alloc(p *proto, dt backend.DType, n int64) (backend.Buffer, error) {
	b, err := p.alloc(nil, dt, n)
	if err != nil {
		return nil, err
	}
	*s = append(*s, owned{p.m, b})
	return b, nil
}

func (s *hopScratch) free() {
	for _, o := range *s {
		o.m.Free(o.b)
	}
	*s = nil
}

// vpart is one relation's share of a combined all-to-all-v: sendN[q]
// elements of send go to rank q (packed in rank order), recvN[q] from
// rank q land in recv.
type vpart struct {
	send, recv   backend.Buffer
	sendN, recvN []int
}

// exchangeV is one all-to-all-v for every part: per peer the parts'
// segments in part order, packed into scratch and unpacked from it by
// device copies (a single part goes as it is).
func (m *typedMachine) exchangeV(ctx context.Context, dt backend.DType, es int, parts []vpart, tmp *hopScratch) error {
	fp, be := m.s.first.p, m.s.be
	fm, P := fp.m, m.s.size
	send, recv := make([]int, P), make([]int, P)
	var ns, nr int64
	for _, pt := range parts {
		for q := range P {
			send[q] += pt.sendN[q]
			recv[q] += pt.recvN[q]
			ns += int64(pt.sendN[q])
			nr += int64(pt.recvN[q])
		}
	}
	if ns > maxEntries || nr > maxEntries {
		return fmt.Errorf("%w: an exchange of %d/%d entries", ErrTooLarge, ns, nr)
	}
	if len(parts) == 1 {
		return fp.a2av(ctx, fm.View(parts[0].recv, 0, nr), recv, fm.View(parts[0].send, 0, ns), send, es)
	}
	cs, err := tmp.alloc(fp, dt, ns)
	if err != nil {
		return err
	}
	cr, err := tmp.alloc(fp, dt, nr)
	if err != nil {
		return err
	}
	// copySegs copies, peer by peer and part by part, between the
	// combined buffer c and the parts' own buffers (toC: into c).
	copySegs := func(c backend.Buffer, toC bool) error {
		at, own := int64(0), make([]int64, len(parts))
		for q := range P {
			for i, pt := range parts {
				b, n := pt.recv, int64(pt.recvN[q])
				if toC {
					b, n = pt.send, int64(pt.sendN[q])
				}
				if n > 0 {
					d, s := fm.View(b, own[i], n), fm.View(c, at, n)
					if toC {
						d, s = s, d
					}
					if err := be.Copy(d, s); err != nil {
						return err
					}
				}
				own[i] += n
				at += n
			}
		}
		return nil
	}
	if err := copySegs(cs, true); err != nil {
		return err
	}
	if err := fp.a2av(ctx, fm.View(cr, 0, nr), recv, fm.View(cs, 0, ns), send, es); err != nil {
		return err
	}
	return copySegs(cr, false)
}

// drawRels draws relations rs at hop (frontiers dst and stream keys
// keys, one per relation) through one exchange per phase. It follows
// proto.draw's rules per relation: a failure before the header (the
// machine's status, a routing failure) is reported in it, a failure
// between the header and the last exchange returns at once, one after
// it is carried to the next header (the edge sets are then empty).
func (m *typedMachine) drawRels(hop int, rs []int, dst []tNodes, keys []uint64) ([]*tRel, error) {
	s, ctx := m.s, m.ctx
	fp, be := s.first.p, s.be
	fm, P, L := fp.m, s.size, s.hops
	var tmp hopScratch
	defer tmp.free()
	hs := make([]*hopRel, len(rs))
	for i, r := range rs {
		if r < 0 || r >= len(s.per) || s.per[r] == nil { // SampleTyped draws only relations sampled at the hop
			return nil, fp.errf(hop, ErrProtocol, "relation %d is never sampled", r)
		}
		hs[i] = &hopRel{r: r, p: s.per[r].p, k: s.fanouts[r][hop], dst: dst[i], key: keys[i]}
	}
	status, carried := m.status, m.carried

	// 1. Shuffle: route every relation's frontier by owner into its own
	// header rows, then gather the rows per peer.
	for _, h := range hs {
		if status != stOK {
			break
		}
		p := h.p
		fail := func(what string, err error) {
			status, carried = stFailed, p.wrapErr(hop, fmt.Sprintf("relation %d: %s", h.r, what), err)
		}
		if h.k > 0 && !stridedCap(h.dst.n, h.k) {
			status, carried = stTooLarge, p.errf(hop, ErrTooLarge, "relation %d: a frontier of %d nodes at fanout %d", h.r, h.dst.n, h.k)
			break
		}
		h.F = h.dst.b
		var err error
		if h.F == nil {
			if h.F, err = m.alloc(backend.Int32, 0); err != nil {
				fail("allocating an empty frontier", err)
				break
			}
		}
		cl := ctlLayout{P}
		nFB := p.m.View(p.ctl, cl.nSeeds(), 1)
		if err := p.m.Upload(nFB, []int64{h.dst.n}); err != nil {
			fail("uploading the frontier's size", err)
			break
		}
		if h.send, err = tmp.alloc(p, backend.Int32, h.dst.n); err == nil {
			h.pos, err = tmp.alloc(p, backend.Int32, h.dst.n)
		}
		if err == nil {
			err = p.m.Route(p.m.View(p.ctl, cl.sendHdr(), cl.hdrWords()), h.send, h.pos, h.F, nFB, p.m.View(p.ctl, cl.ctr(), int64(2*(P+1))), h.dst.n, h.key, hop, h.k, L)
		}
		if err != nil {
			fail("routing", err)
		}
	}
	nS, HW := len(hs), int64(HeaderWords)
	tc := typedCtl{P, s.nRel}
	W := tc.hdr(nS)
	sendH, recvH := fm.View(s.ctl, 0, W), fm.View(s.ctl, W, W)
	row := func(q, i int) int64 { return (int64(q*nS) + int64(i)) * HW } // peer q's row of relation i
	if status == stOK {
		for i, h := range hs {
			for q := range P {
				if status != stOK {
					break
				}
				if err := be.Copy(fm.View(sendH, row(q, i), HW), h.p.m.View(h.p.ctl, int64(q)*HW, HW)); err != nil {
					status, carried = stFailed, h.p.wrapErr(hop, "gathering the headers", err)
					break
				}
			}
		}
	}
	if status != stOK {
		w := make([]int64, W)
		for i, h := range hs {
			fh := makeHeader(P, status, h.key, hop, h.k, L)
			for q := range P {
				copy(w[row(q, i):row(q, i)+HW], fh[int64(q)*HW:int64(q+1)*HW])
			}
		}
		if err := fm.Upload(sendH, w); err != nil {
			return nil, carried
		}
	}
	if err := fp.a2a(ctx, recvH, sendH, nS*HeaderWords, 8); err != nil {
		return nil, fp.wrapErr(hop, "header exchange", err)
	}
	hw, err := fp.read([]backend.Buffer{s.ctl}, []int64{2 * W})
	if err != nil {
		return nil, fp.wrapErr(hop, "reading the header", err)
	}
	if status != stOK {
		return nil, carried
	}
	ks, fcaps, rows := make([]int, nS), make([]int64, nS), make([]int64, nS)
	for i, h := range hs {
		ks[i], fcaps[i], rows[i] = h.k, h.dst.n, h.p.rows
	}
	pls, bad, kind, msg := readTypedHeader(hw[:2*W], P, s.rank, hop, L, ks, fcaps, rows)
	if kind != nil {
		if bad < 0 {
			return nil, fp.errf(hop, kind, "%s", msg)
		}
		return nil, hs[bad].p.errf(hop, kind, "relation %d: %s", hs[bad].r, msg)
	}
	for i, h := range hs {
		h.pl = pls[i]
		s.stats.Frontier[hop] += h.pl.nF
	}

	// The requests of every relation in one exchange.
	parts := make([]vpart, nS)
	for i, h := range hs {
		if h.recv, err = tmp.alloc(h.p, backend.Int32, h.pl.R); err != nil {
			return nil, h.p.wrapErr(hop, "allocating the received frontier", err)
		}
		parts[i] = vpart{send: h.send, recv: h.recv, sendN: ints(h.pl.sendN), recvN: ints(h.pl.recvN)}
	}
	if err := m.exchangeV(ctx, backend.Int32, 4, parts, &tmp); err != nil {
		return nil, fp.wrapErr(hop, "node exchange", err)
	}

	// 2. Sample at the owners.
	var exact []*hopRel
	for _, h := range hs {
		if h.k < 0 {
			exact = append(exact, h)
			continue
		}
		if err := m.drawStrided(hop, h, &tmp); err != nil {
			return nil, err
		}
	}
	if len(exact) > 0 {
		if err := m.totals(hop, exact, &tmp); err != nil {
			return nil, err
		}
	}

	// 3. Reshuffle: the answers of every relation in one exchange (their
	// edge IDs in a second).
	for i, h := range hs {
		if h.k > 0 {
			send, recv := h.pl.stridedCounts(h.k)
			parts[i] = vpart{send: h.out, recv: h.ans, sendN: send, recvN: recv}
		} else {
			send, recv := h.pl.answerCounts()
			parts[i] = vpart{send: h.out, recv: h.ans, sendN: send, recvN: recv}
		}
	}
	if err := m.exchangeV(ctx, backend.Int32, 4, parts, &tmp); err != nil {
		return nil, fp.wrapErr(hop, "answer exchange", err)
	}
	if s.cfg.EdgeIDs {
		for i, h := range hs {
			parts[i].send, parts[i].recv = h.outE, h.ansE
			if h.k < 0 {
				parts[i].sendN, parts[i].recvN = ints(h.pl.tot), ints(h.pl.rtot)
			}
		}
		if err := m.exchangeV(ctx, backend.Int64, 8, parts, &tmp); err != nil {
			return nil, fp.wrapErr(hop, "edge ID exchange", err)
		}
	}

	// The edges in frontier order: failures from here on are carried to
	// the next header.
	out := make([]*tRel, nS)
	carry := func(err error) ([]*tRel, error) {
		m.status, m.carried = stFailed, err
		for i, h := range hs {
			out[i] = &tRel{nd: h.dst.n}
		}
		return out, nil
	}
	var counts []backend.Buffer // at fixed fanouts, each relation's edge count
	var fixed []*hopRel
	for _, h := range hs {
		if err := m.unpack(h); err != nil {
			return carry(h.p.wrapErr(hop, fmt.Sprintf("relation %d: assembling the block", h.r), err))
		}
		if h.k > 0 {
			counts, fixed = append(counts, fm.View(h.g.ptr, h.pl.nF, 1)), append(fixed, h)
		}
	}
	if len(counts) > 0 { // ecap is a bound: one read of every count
		n := make([]int64, len(counts))
		for i := range n {
			n[i] = 1
		}
		w, err := fp.read(counts, n)
		if err != nil {
			return carry(fp.wrapErr(hop, "reading the edge counts", err))
		}
		for i, h := range fixed {
			if w[i] < 0 || w[i] > h.E {
				return carry(h.p.errf(hop, ErrProtocol, "relation %d: %d edges for %d nodes at fanout %d", h.r, w[i], h.pl.nF, h.k))
			}
			h.g.e = w[i]
		}
	}
	for i, h := range hs {
		out[i] = h.g
	}
	return out, nil
}

// readTypedHeader checks a batched hop's header words hw (the rows sent,
// then the rows received: P peer blocks of one row per relation each)
// for relations at fanouts ks with frontiers of at most fcaps nodes and
// rows owned rows, at hop of hops, on rank of P, and returns their
// plans. On a violation it returns the relation's index (-1: the words
// themselves) and why.
func readTypedHeader(hw []int64, P, rank, hop, hops int, ks []int, fcaps, rows []int64) (pls []*plan, bad int, kind error, msg string) {
	nS := len(ks)
	if P < 1 || nS < 1 || len(fcaps) != nS || len(rows) != nS || int64(len(hw)) != 2*int64(P)*int64(nS)*HeaderWords {
		return nil, -1, ErrProtocol, fmt.Sprintf("header of %d words for %d ranks and %d relations", len(hw), P, nS)
	}
	W := P * nS * HeaderWords
	sent, recv := splitRows(hw[:W], P, nS, HeaderWords), splitRows(hw[W:], P, nS, HeaderWords)
	pls = make([]*plan, nS)
	for i := range nS {
		pls[i] = &plan{P: P, rank: rank}
		if kind, msg := pls[i].readHeader(recv[i], sent[i], hop, ks[i], hops, fcaps[i], rows[i]); kind != nil {
			return nil, i, kind, msg
		}
	}
	return pls, -1, nil, ""
}

// splitRows takes words of P peer blocks, each nS rows of w words (one
// per relation), apart: per relation, its P rows.
func splitRows(words []int64, P, nS, w int) [][]int64 {
	out := make([][]int64, nS)
	for i := range nS {
		out[i] = make([]int64, 0, P*w)
		for q := range P {
			at := (q*nS + i) * w
			out[i] = append(out[i], words[at:at+w]...)
		}
	}
	return out
}

// drawStrided is proto.strided's owner side for relation h at fanout k >
// 0 and the requester's answer buffers.
func (m *typedMachine) drawStrided(hop int, h *hopRel, tmp *hopScratch) error {
	p, pl := h.p, h.pl
	if kind, msg := pl.stridedSizes(h.k); kind != nil {
		return p.errf(hop, kind, "relation %d: %s", h.r, msg)
	}
	RK, FK := pl.R*int64(h.k), pl.nF*int64(h.k)
	err := func() error {
		var err error
		if h.out, err = tmp.alloc(p, backend.Int32, RK); err != nil {
			return err
		}
		if h.outE, err = tmp.alloc(p, backend.Int64, RK); err != nil {
			return err
		}
		if err := p.m.DrawStrided(hop, h.recv, pl.R, pl.roff, pl.keys, h.out, h.outE); err != nil {
			return err
		}
		if h.ans, err = tmp.alloc(p, backend.Int32, FK); err != nil {
			return err
		}
		if m.s.cfg.EdgeIDs {
			h.ansE, err = tmp.alloc(p, backend.Int64, FK)
		}
		return err
	}()
	if err != nil {
		return p.wrapErr(hop, fmt.Sprintf("relation %d: drawing", h.r), err)
	}
	h.E = FK
	return nil
}

// totals is proto.exact's middle for the relations that take every
// neighbor, together: the owners count (one read of every relation's
// totals), the ranks exchange per-requester totals and statuses (one
// exchange for all of them), and the owners draw.
func (m *typedMachine) totals(hop int, xs []*hopRel, tmp *hopScratch) error {
	s := m.s
	fp, fm, P := s.first.p, s.first.p.m, s.size
	var srcs []backend.Buffer
	var n []int64
	var counted []*hopRel
	for _, h := range xs {
		qptr, tot, err := h.p.m.CountExact(hop, h.recv, h.pl.R, h.pl.roff)
		if err != nil {
			h.st3, h.err3 = stFailed, h.p.wrapErr(hop, fmt.Sprintf("relation %d: counting the received nodes", h.r), err)
			continue
		}
		*tmp = append(*tmp, owned{h.p.m, qptr}, owned{h.p.m, tot})
		h.qptr, h.tot = qptr, tot
		srcs, n, counted = append(srcs, tot), append(n, int64(P+1)), append(counted, h)
	}
	if len(srcs) > 0 {
		tw, err := fp.read(srcs, n)
		for i, h := range counted {
			if err != nil {
				h.st3, h.err3 = stFailed, fp.wrapErr(hop, "reading the totals", err)
				continue
			}
			w := tw[i*(P+1) : (i+1)*(P+1)]
			if st, msg := h.pl.ownerTotals(w[:P], w[P], -1); st != stOK {
				kind := ErrTooLarge
				if st != stTooLarge {
					kind = ErrProtocol
				}
				h.st3, h.err3 = st, h.p.errf(hop, kind, "relation %d: %s", h.r, msg)
			}
		}
	}
	var err3 error // the first relation's failure: this rank's error
	for _, h := range xs {
		if h.st3 == stOK {
			// The owner's answer buffers, before the status goes out.
			var err error
			if h.outE, err = tmp.alloc(h.p, backend.Int64, h.pl.E); err == nil {
				h.out, err = tmp.alloc(h.p, backend.Int32, h.pl.R+h.pl.E)
			}
			if err != nil {
				h.st3, h.err3 = stFailed, h.p.wrapErr(hop, fmt.Sprintf("relation %d: allocating the drawn edges", h.r), err)
			}
		}
		if err3 == nil {
			err3 = h.err3
		}
	}
	nX := len(xs)
	tc := typedCtl{P, s.nRel}
	TW := tc.tot(nX)
	sendT, recvT := fm.View(s.ctl, tc.tot0(), TW), fm.View(s.ctl, tc.tot0()+TW, TW)
	w := make([]int64, TW)
	for i, h := range xs {
		rows := h.pl.totalsSend(h.st3)
		for q := range P {
			at := (q*nX + i) * tWords
			copy(w[at:at+tWords], rows[q*tWords:(q+1)*tWords])
		}
	}
	if err := fm.Upload(sendT, w); err != nil {
		if err3 != nil {
			return err3
		}
		return fp.wrapErr(hop, "preparing the totals", err)
	}
	if err := fp.a2a(m.ctx, recvT, sendT, nX*tWords, 8); err != nil {
		return fp.wrapErr(hop, "totals exchange", err)
	}
	rt, err := fp.read([]backend.Buffer{recvT}, []int64{TW})
	if err3 != nil {
		return err3
	}
	if err != nil {
		return fp.wrapErr(hop, "reading the totals", err)
	}
	recv := splitRows(rt[:TW], P, nX, tWords)
	for i, h := range xs {
		if kind, msg := h.pl.readTotals(recv[i], -1); kind != nil {
			return h.p.errf(hop, kind, "relation %d: %s", h.r, msg)
		}
	}
	for _, h := range xs {
		p, pl := h.p, h.pl
		err := func() error {
			if err := p.m.DrawExact(hop, h.recv, h.qptr, pl.R, pl.roff, pl.keys, h.out, h.outE, pl.E); err != nil {
				return err
			}
			var err error
			if h.ans, err = tmp.alloc(p, backend.Int32, pl.nF+pl.Erecv); err != nil {
				return err
			}
			if s.cfg.EdgeIDs {
				h.ansE, err = tmp.alloc(p, backend.Int64, pl.Erecv)
			}
			return err
		}()
		if err != nil {
			return p.wrapErr(hop, fmt.Sprintf("relation %d: drawing", h.r), err)
		}
		h.E = pl.Erecv
	}
	return nil
}

// unpack takes relation h's answers into frontier order: h.g's row
// offsets, sources (global IDs) and edge IDs, kept for the batch.
func (m *typedMachine) unpack(h *hopRel) error {
	p, pl := h.p, h.pl
	g := &tRel{nd: pl.nF, e: h.E}
	h.g = g
	var err error
	if g.src, err = p.alloc(nil, backend.Int32, h.E); err != nil {
		return err
	}
	m.keep(p.m, g.src)
	if g.ptr, err = p.alloc(nil, backend.Int64, pl.nF+1); err != nil {
		return err
	}
	m.keep(p.m, g.ptr)
	if g.eid, err = p.alloc(nil, backend.Int64, h.E); err != nil {
		return err
	}
	m.keep(p.m, g.eid)
	if h.k > 0 {
		return p.m.UnpackStrided(g.ptr, g.src, g.eid, h.ans, h.ansE, h.pos, pl.nF, h.k)
	}
	return p.m.UnpackExact(g.ptr, g.src, g.eid, h.ans, h.ansE, h.pos, pl.bptr(), pl.S, pl.nF, h.E)
}
