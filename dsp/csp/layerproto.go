package csp

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Domain tags of the layer-wise streams (tagLayerAlloc, the allocation's,
// is in layeralloc.go): the CPU and CUDA machines draw the same numbers.
const (
	tagLayerNode = 0x4c41594e // "LAYN": a frontier node's neighbor draws
)

// MaxLayerFanout bounds a layer's edge budget.
const MaxLayerFanout = 1 << 24

// ownerShift: the requester reads each frontier node's degree with its
// owner in the bits above (layer.cu's LW_OWNER_SHIFT).
const ownerShift = 48

// LayerMachine is what the layer-wise protocol needs from one rank's
// device: the node-wise machine's buffers, routing and relabeling, and
// the kernels of layer.cu. As in machine, every method but read queues
// work and returns.
type LayerMachine interface {
	Machine

	// Info answers the R received nodes ids: out[i*w] their degree and,
	// with weights (w == 2), out[i*w+1] the float64 bits of their row's
	// weight sum. Nodes this rank does not own add to bad[0].
	Info(ids backend.Buffer, R int64, out, bad backend.Buffer) error
	// FrontierInfo takes the answers in grouped order (owner q's at
	// bptr[q]) into frontier order (pos[j] is grouped j's position):
	// out[i*w] = degree | owner<<ownerShift, out[i*w+1] the weight.
	FrontierInfo(out, in, pos backend.Buffer, bptr []int64, nF int64) error
	// PackAlloc writes the allocation allocF (frontier order) in grouped
	// order to allocG (nF+1 entries, the last 0) and to msg, where owner
	// q's part is hdr[2q], hdr[2q+1] (status, total), then its counts.
	PackAlloc(allocG, msg, allocF, pos backend.Buffer, bptr, hdr []int64, nF int64) error
	// DrawLayer draws the received allotments: msg holds requester p's
	// status, total and counts at roff[p]+2p; info is what info wrote.
	// Counts an owner refuses, or segments that do not add up to tot,
	// add to bad[0] and nothing is drawn. src (int32) and eid (int64
	// global edge IDs) get the E draws, in received order, -1 where
	// nothing was drawn.
	DrawLayer(ids, info, msg backend.Buffer, R int64, roff, tot []int64, keys []uint64, src, eid backend.Buffer, E int64, bad backend.Buffer) error
	// UnpackLayer puts the answers (grouped order, allocG's counts) into
	// the block's rows (ptr, frontier order): src, and eid from ansE (-1
	// when nil). Neighbors outside [0, NumNodes) add to bad[0].
	UnpackLayer(src, eid, ans, ansE, ptr, allocG, pos backend.Buffer, nF, E int64, bad backend.Buffer) error
}

// lproto is one rank's side of the layer-wise protocol (see the package
// doc). It shares the node-wise protocol's exchanges, reads, buffers and
// header; m is the same machine as proto.m.
type lproto struct {
	*proto
	lm                LayerMachine
	replace, weighted bool
	bad               backend.Buffer // int64, 2 per hop: the owner's and the requester's violations
}

// infoWords is the words per node of the degree answer.
func (lp *lproto) infoWords() int64 {
	if lp.weighted {
		return 2
	}
	return 1
}

// layerNodeKey is the key of the owners' draws for the requester's batch
// key at hop: node v draws with rng.Derive(it, v).
func layerNodeKey(key sample.Key, hop int) uint64 {
	return rng.Derive(key.Seed, tagLayerNode, uint64(key.Epoch), uint64(key.Batch), uint64(hop))
}

// sample runs one step, as proto.sample: every hop, then one read of
// every block's sizes and the owners' and requesters' violation counters.
func (lp *lproto) sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) ([]HopOut, error) {
	p := lp.proto
	L := len(p.fan)
	return p.step(ctx, seeds, key, stepSpec{hop: lp.hop, exactEdges: true, extra: lp.bad, extraWords: int64(2 * L),
		check: func(w []int64) error {
			for h := range L {
				if ob, rb := w[2*h], w[2*h+1]; ob != 0 || rb != 0 {
					return p.errf(h, ErrProtocol, "%d invalid requests from peers, %d invalid neighbors received", ob, rb)
				}
			}
			return nil
		}})
}

// hop runs layer-wise hop h for the frontier F (nFB[0] nodes on the
// device, at most fcap) into out and returns the next frontier's bound.
// status != stOK takes part in the header exchange only, then returns
// carried.
func (lp *lproto) hop(ctx context.Context, h int, F, nFB backend.Buffer, fcap int64, status int64, carried error, key sample.Key, out *HopOut, nFOut *int64) (next int64, err error) {
	p, lm := lp.proto, lp.lm
	P, m := p.size, p.m
	f := p.fan[h]
	w := lp.infoWords()
	var tmp []backend.Buffer
	defer func() {
		for _, b := range tmp {
			m.Free(b)
		}
	}()
	nk := layerNodeKey(key, h)
	badO, badR := m.View(lp.bad, int64(2*h), 1), m.View(lp.bad, int64(2*h+1), 1)

	// 1. Shuffle, as node-wise hops: the header tells every owner how
	// many nodes come and the requester's node key.
	pl, sendIDs, pos, err := p.shuffle(ctx, h, F, nFB, fcap, status, carried, nk, f, &tmp)
	if err != nil {
		return 0, err
	}
	nF, R := pl.nF, pl.R
	*nFOut = nF
	p.stats.Frontier[h] += nF
	if R*w+int64(2*P) > maxEntries || nF*w+int64(2*P) > maxEntries {
		return 0, p.errf(h, ErrTooLarge, "%d nodes received, %d sent", R, nF)
	}
	// Every buffer whose size the header fixes, before the exchanges.
	var recvIDs, infoO, infoI, infoF, allocF, allocG, msg, rmsg backend.Buffer
	err = func() error {
		for _, b := range []struct {
			dst *backend.Buffer
			dt  backend.DType
			n   int64
		}{{&recvIDs, backend.Int32, R}, {&infoO, backend.Int64, R * w}, {&infoI, backend.Int64, nF * w}, {&infoF, backend.Int64, nF * w},
			{&allocF, backend.Int64, nF}, {&allocG, backend.Int64, nF + 1}, {&msg, backend.Int64, nF + int64(2*P)}, {&rmsg, backend.Int64, R + int64(2*P)}} {
			var err error
			if *b.dst, err = p.alloc(&tmp, b.dt, b.n); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return 0, p.wrapErr(h, "allocating the hop's buffers", err)
	}
	sendN, recvN := ints(pl.sendN), ints(pl.recvN)
	if err := p.a2av(ctx, m.View(recvIDs, 0, R), recvN, m.View(sendIDs, 0, nF), sendN, 4); err != nil {
		return 0, p.wrapErr(h, "node exchange", err)
	}

	// 2. Owners answer each node's degree (and weight).
	if err := lm.Info(recvIDs, R, infoO, badO); err != nil {
		return 0, p.wrapErr(h, "reading the degrees", err)
	}
	if err := p.a2av(ctx, m.View(infoI, 0, nF*w), scale(sendN, int(w)), m.View(infoO, 0, R*w), scale(recvN, int(w)), 8); err != nil {
		return 0, p.wrapErr(h, "degree exchange", err)
	}
	bptr := pl.bptr()
	if err := lm.FrontierInfo(infoF, infoI, pos, bptr, nF); err != nil {
		return 0, p.wrapErr(h, "ordering the degrees", err)
	}
	fi, err := p.read([]backend.Buffer{infoF}, []int64{nF * w})
	if err != nil {
		return 0, p.wrapErr(h, "reading the degrees", err)
	}

	// 3. The requester allots the layer's draws on the host (csp's
	// allocation, bit for bit) and tells each owner its counts, with a
	// status and total per owner: a failure here reaches every rank.
	alloc, sendTot, st, aerr := lp.allocate(h, f, key, fi, nF)
	E := int64(0)
	for _, t := range sendTot {
		E += t
	}
	hdr := make([]int64, 2*P)
	for q := range P {
		hdr[2*q] = st
		if st == stOK {
			hdr[2*q+1] = sendTot[q]
		}
	}
	if err := m.Upload(allocF, alloc); err != nil {
		return 0, p.wrapErr(h, "uploading the allocation", err)
	}
	if err := lm.PackAlloc(allocG, msg, allocF, pos, bptr, hdr, nF); err != nil {
		return 0, p.wrapErr(h, "packing the allocation", err)
	}
	if err := p.a2av(ctx, m.View(rmsg, 0, R+int64(2*P)), plus(recvN, 2), m.View(msg, 0, nF+int64(2*P)), plus(sendN, 2), 8); err != nil {
		return 0, p.wrapErr(h, "allocation exchange", err)
	}
	hsrc, hn := make([]backend.Buffer, P), make([]int64, P)
	for q := range P {
		hsrc[q], hn[q] = m.View(rmsg, pl.roff[q]+int64(2*q), 2), 2
	}
	rh, err := p.read(hsrc, hn)
	if err != nil {
		return 0, p.wrapErr(h, "reading the allocation headers", err)
	}
	if aerr != nil {
		return 0, aerr
	}
	tot := make([]int64, P)
	var Eo int64
	for q := range P {
		if q != p.rank && rh[2*q] != stOK {
			return 0, p.errf(h, ErrPeer, "rank %d: %s", q, statusText(rh[2*q]))
		}
	}
	for q := range P {
		t := rh[2*q+1]
		if t < 0 || (f > 0 && t > int64(f)) || t > maxEntries {
			return 0, p.errf(h, ErrProtocol, "rank %d asks for %d edges of its %d nodes here (fanout %d)", q, t, pl.recvN[q], f)
		}
		tot[q] = t
		if Eo += t; Eo > maxEntries {
			return 0, p.errf(h, ErrTooLarge, "more than %d edges to draw", int64(maxEntries))
		}
	}

	// 4. Owners draw; 5. the answers go back.
	var srcO, eidO, ans, ansE backend.Buffer
	err = func() error {
		var err error
		if srcO, err = p.alloc(&tmp, backend.Int32, Eo); err != nil {
			return err
		}
		if eidO, err = p.alloc(&tmp, backend.Int64, Eo); err != nil {
			return err
		}
		if err := lm.DrawLayer(recvIDs, infoO, rmsg, R, pl.roff, tot, pl.keys, srcO, eidO, Eo, badO); err != nil {
			return err
		}
		if ans, err = p.alloc(&tmp, backend.Int32, E); err != nil {
			return err
		}
		if p.edgeIDs {
			ansE, err = p.alloc(&tmp, backend.Int64, E)
		}
		return err
	}()
	if err != nil {
		return 0, p.wrapErr(h, "drawing", err)
	}
	back := ints(sendTot)
	if err := p.a2av(ctx, m.View(ans, 0, E), back, m.View(srcO, 0, Eo), ints(tot), 4); err != nil {
		return 0, p.wrapErr(h, "answer exchange", err)
	}
	if p.edgeIDs {
		if err := p.a2av(ctx, m.View(ansE, 0, E), back, m.View(eidO, 0, Eo), ints(tot), 8); err != nil {
			return 0, p.wrapErr(h, "edge ID exchange", err)
		}
	}

	// The block, in frontier order: failures from here on are carried.
	out.NumDst, out.ecap = nF, E
	err = func() error {
		var err error
		if out.Indptr, err = p.alloc(nil, backend.Int64, nF+1); err != nil {
			return err
		}
		if err := m.Upload(out.Indptr, rowOffsets(alloc)); err != nil {
			return err
		}
		if out.EdgeIDs, err = p.alloc(nil, backend.Int64, E); err != nil {
			return err
		}
		src, err := p.alloc(&tmp, backend.Int32, E)
		if err != nil {
			return err
		}
		if err := lm.UnpackLayer(src, out.EdgeIDs, ans, ansE, out.Indptr, allocG, pos, nF, E, badR); err != nil {
			return err
		}
		out.SrcNodes, out.Indices, out.Sizes, err = m.Relabel(F, nF, src, out.Indptr, E)
		return err
	}()
	if err != nil {
		return 0, &carry{p.wrapErr(h, "assembling the block", err)}
	}
	return nF + E, nil
}

// allocate decodes the frontier's degrees (fi: w words per node in
// frontier order) and allots the layer's budget: alloc per frontier node,
// the edges asked of each owner, and the status for the allocation
// header with this rank's error when it is not stOK.
func (lp *lproto) allocate(h, f int, key sample.Key, fi []int64, nF int64) (alloc, sendTot []int64, st int64, err error) {
	p := lp.proto
	w := lp.infoWords()
	sendTot = make([]int64, p.size)
	alloc = make([]int64, nF)
	deg, wt, owner := make([]int64, nF), make([]float64, nF), make([]int, nF)
	for i := range nF {
		x := fi[i*w]
		d, o := x&(1<<ownerShift-1), x>>ownerShift
		if o < 0 || o >= int64(p.size) || d > maxEntries {
			return alloc, sendTot, stFailed, p.errf(h, ErrProtocol, "frontier node %d: degree word %#x", i, x)
		}
		deg[i], owner[i], wt[i] = d, int(o), float64(d)
		if lp.weighted {
			wt[i] = math.Float64frombits(uint64(fi[i*w+1]))
			if !(wt[i] >= 0) || math.IsInf(wt[i], 1) {
				return alloc, sendTot, stFailed, p.errf(h, ErrProtocol, "frontier node %d has weight %v", i, wt[i])
			}
		}
	}
	a := LayerAllocate(f, lp.replace, key, h, deg, wt)
	var E int64
	for i, k := range a {
		sendTot[owner[i]] += k
		E += k
	}
	if E > maxEntries || nF+E >= math.MaxInt32/2 {
		return alloc, make([]int64, p.size), stTooLarge, p.errf(h, ErrTooLarge, "%d destinations and %d drawn edges", nF, E)
	}
	return a, sendTot, stOK, nil
}

// rowOffsets is the exclusive scan of counts with the total appended.
func rowOffsets(counts []int64) []int64 {
	out := make([]int64, len(counts)+1)
	for i, c := range counts {
		out[i+1] = out[i] + c
	}
	return out
}

func scale(x []int, k int) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = v * k
	}
	return out
}

func plus(x []int, k int) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = v + k
	}
	return out
}

// checkLayerConfig checks a layer-wise configuration as csp.NewLayerSampler
// does (the weights themselves are checked where they are uploaded).
func checkLayerConfig(cfg Config) error {
	if len(cfg.Fanouts) == 0 || len(cfg.Fanouts) > maxHops {
		return fmt.Errorf("%d fanouts: want 1 to %d hops", len(cfg.Fanouts), maxHops)
	}
	for i, f := range cfg.Fanouts {
		if f != -1 && (f <= 0 || f > MaxLayerFanout) {
			return fmt.Errorf("fanout %d of hop %d: want -1 (every edge) or 1..%d edges per layer", f, i, MaxLayerFanout)
		}
	}
	if cfg.Weighted && !cfg.Replace {
		return fmt.Errorf("weighted layer-wise sampling is with replacement only")
	}
	return nil
}
