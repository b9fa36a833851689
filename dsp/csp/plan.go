package csp

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/graph"
)

// Header words: the first exchange of every hop sends one row of HeaderWords
// int64 to every peer. The device writes them (csp_route_scatter); the
// host only when it reports a failure.
const (
	hStatus = iota // 0, or why this rank fails the step (st*)
	hCount         // frontier nodes it sends to that peer
	hKey           // its hop key (the owner draws with it)
	hHop           // the hop: must agree
	hFanout        // the hop's fanout: must agree
	hHops          // the number of hops: must agree
	hNF            // the sender's frontier size (device-known until now)
	hBad           // frontier nodes outside [0, NumNodes) (a device bug)
	HeaderWords
)

// Totals words: the second status exchange of a hop that takes every
// neighbor (owner -> requester).
const (
	tStatus = iota
	tTotal  // neighbors the owner returns to that requester
	tWords
)

// Status words.
const (
	stOK       = 0
	stInput    = 1 // invalid seeds
	stFailed   = 2 // a local failure (device, allocation, previous hop)
	stTooLarge = 3 // the hop would exceed 2^31-1 entries
)

// maxEntries bounds every device buffer and block (int32 indices).
const maxEntries = math.MaxInt32 - 1

func statusText(st int64) string {
	switch st {
	case stInput:
		return "invalid input"
	case stFailed:
		return "failed"
	case stTooLarge:
		return "too large"
	}
	return fmt.Sprintf("status %d", st)
}

// ownerOf is the owner of v under offsets (len P+1): the host mirror of
// the csp_owner kernel, P when v is outside [0, off[P]).
func ownerOf(off []int64, v int64) int {
	P := len(off) - 1
	if v < 0 || v >= off[P] {
		return P
	}
	lo, hi := 0, P
	for hi-lo > 1 {
		mid := (lo + hi) >> 1
		if off[mid] <= v {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// checkSeeds requires distinct seeds in [0, n).
func checkSeeds(seeds []graph.NodeID, n int64) error {
	if int64(len(seeds)) > n {
		return fmt.Errorf("%d seeds but only %d nodes", len(seeds), n)
	}
	for i, v := range seeds {
		if v < 0 || int64(v) >= n {
			return fmt.Errorf("seed %d: node %d not in [0, %d)", i, v, n)
		}
	}
	sorted := slices.Clone(seeds)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			first := slices.Index(seeds, sorted[i])
			second := first + 1 + slices.Index(seeds[first+1:], sorted[i])
			return fmt.Errorf("seed %d: node %d already at position %d", second, sorted[i], first)
		}
	}
	return nil
}

// makeHeader is the header this rank sends (counts left 0: the device
// fills them in).
func makeHeader(P int, status int64, key uint64, hop, fanout, hops int) []int64 {
	h := make([]int64, P*HeaderWords)
	for p := range P {
		row := h[p*HeaderWords : (p+1)*HeaderWords]
		row[hStatus], row[hKey], row[hHop], row[hFanout], row[hHops] = status, int64(key), int64(hop), int64(fanout), int64(hops)
	}
	return h
}

// plan is one hop's sizes on one rank, from its status exchanges.
type plan struct {
	P, rank int
	nF      int64    // this rank's frontier
	sendN   []int64  // frontier nodes sent to each owner (grouped by owner)
	recvN   []int64  // nodes received from each requester
	keys    []uint64 // the requesters' hop keys
	roff    []int64  // P+1: requester segments of the received nodes
	R       int64    // nodes received
	// A hop with fanout -1 (every neighbor) also exchanges totals:
	tot   []int64 // neighbors this rank returns to each requester
	E     int64   // their sum
	rtot  []int64 // neighbors each owner returns to this rank
	S     []int64 // P: exclusive prefix sums of rtot
	Erecv int64   // sum of rtot
}

// peerFailed returns the first peer whose status word (at word w of rows
// of width W) is not OK, or -1.
func peerFailed(recv []int64, P, W, w, rank int) (int, int64) {
	for p := range P {
		if p != rank && recv[p*W+w] != stOK {
			return p, recv[p*W+w]
		}
	}
	return -1, 0
}

// readHeader checks the header this rank received (recv) and sent (sent,
// as the device wrote it) at hop, fanout and hops, for a frontier of at
// most fcap nodes and rows owned rows, and fills nF, sendN, recvN, keys,
// roff and R. The caller has already handled its own status.
func (pl *plan) readHeader(recv, sent []int64, hop, fanout, hops int, fcap, rows int64) (kind error, msg string) {
	P, W := pl.P, HeaderWords
	if len(recv) != P*W || len(sent) != P*W {
		return ErrProtocol, fmt.Sprintf("header of %d/%d words, want %d", len(recv), len(sent), P*W)
	}
	if p, st := peerFailed(recv, P, W, hStatus, pl.rank); p >= 0 {
		return ErrPeer, fmt.Sprintf("rank %d: %s", p, statusText(st))
	}
	pl.sendN, pl.recvN, pl.keys, pl.roff = make([]int64, P), make([]int64, P), make([]uint64, P), make([]int64, P+1)
	nF, bad := sent[hNF], sent[hBad]
	if nF < 0 || nF > fcap {
		return ErrProtocol, fmt.Sprintf("frontier of %d nodes, at most %d expected", nF, fcap)
	}
	if bad != 0 {
		return ErrProtocol, fmt.Sprintf("%d of %d frontier nodes outside [0, NumNodes)", bad, nF)
	}
	var sum int64
	for p := range P {
		row := recv[p*W : (p+1)*W]
		if row[hHop] != int64(hop) || row[hFanout] != int64(fanout) || row[hHops] != int64(hops) {
			return ErrProtocol, fmt.Sprintf("rank %d is at hop %d of %d (fanout %d), this rank at hop %d of %d (fanout %d)",
				p, row[hHop], row[hHops], row[hFanout], hop, hops, fanout)
		}
		c := row[hCount]
		if c < 0 || c > rows || c > row[hNF] {
			return ErrProtocol, fmt.Sprintf("rank %d sends %d nodes (of its %d), this rank owns %d", p, c, row[hNF], rows)
		}
		pl.recvN[p], pl.keys[p] = c, uint64(row[hKey])
		pl.roff[p+1] = pl.roff[p] + c
		s := sent[p*W+hCount]
		if s < 0 || s > nF || sent[p*W+hNF] != nF {
			return ErrProtocol, fmt.Sprintf("%d nodes for rank %d out of a frontier of %d", s, p, nF)
		}
		pl.sendN[p] = s
		sum += s
	}
	if sum != nF {
		return ErrProtocol, fmt.Sprintf("frontier of %d nodes but %d routed", nF, sum)
	}
	pl.nF, pl.R = nF, pl.roff[P]
	if pl.R > maxEntries {
		return ErrTooLarge, fmt.Sprintf("%d nodes received", pl.R)
	}
	return nil, ""
}

// stridedSizes checks that a hop at fanout k > 0 fits: the owner's R*k
// answer slots and the requester's nF*k (stridedCap bounds the latter
// before the header).
func (pl *plan) stridedSizes(k int) (kind error, msg string) {
	if pl.R*int64(k) > maxEntries {
		return ErrTooLarge, fmt.Sprintf("%d received nodes at fanout %d exceed %d answer slots", pl.R, k, int64(maxEntries))
	}
	return nil, ""
}

// stridedCap is whether a frontier of at most fcap nodes fits a hop at
// fanout k > 0 on the requester's side: nF*k answer slots and the
// relabeling of nF*(k+1) nodes (gpusample's bound: below 2^30).
func stridedCap(fcap int64, k int) bool {
	return fcap <= (math.MaxInt32/2-1)/(int64(k)+1)
}

// bptr is the owners' exclusive prefix sums of sendN (P+1 entries): the
// grouped frontier's owner ranges.
func (pl *plan) bptr() []int64 {
	b := make([]int64, pl.P+1)
	for p, s := range pl.sendN {
		b[p+1] = b[p] + s
	}
	return b
}

// stridedCounts are the strided answer exchange's counts: fanout k slots
// per node.
func (pl *plan) stridedCounts(k int) (send, recv []int) {
	send, recv = make([]int, pl.P), make([]int, pl.P)
	for p := range pl.P {
		send[p] = int(pl.recvN[p] * int64(k))
		recv[p] = int(pl.sendN[p] * int64(k))
	}
	return send, recv
}

// ownerTotals takes the owner's per-requester totals (tot, P entries,
// and their sum e as the device computed it) and returns the status for
// the totals exchange.
func (pl *plan) ownerTotals(tot []int64, e int64, fanout int) (st int64, msg string) {
	var sum int64
	for p, t := range tot {
		if t < 0 || (fanout >= 0 && t > int64(fanout)*pl.recvN[p]) {
			return stFailed, fmt.Sprintf("%d edges drawn for %d nodes of rank %d (fanout %d)", t, pl.recvN[p], p, fanout)
		}
		sum += t
	}
	if sum != e {
		return stFailed, fmt.Sprintf("totals add up to %d, not %d", sum, e)
	}
	if e > maxEntries || pl.R+e > maxEntries {
		return stTooLarge, fmt.Sprintf("%d nodes and %d drawn edges exceed %d entries", pl.R, e, maxEntries)
	}
	pl.tot, pl.E = slices.Clone(tot), e
	return stOK, ""
}

// totalsSend is this rank's row per requester for the totals exchange.
func (pl *plan) totalsSend(st int64) []int64 {
	out := make([]int64, pl.P*tWords)
	for p := range pl.P {
		out[p*tWords+tStatus] = st
		if st == stOK {
			out[p*tWords+tTotal] = pl.tot[p]
		}
	}
	return out
}

// readTotals checks the totals this rank received (one row per owner)
// and fills rtot, S and Erecv.
func (pl *plan) readTotals(recv []int64, fanout int) (kind error, msg string) {
	P, W := pl.P, tWords
	if len(recv) != P*W {
		return ErrProtocol, fmt.Sprintf("totals of %d words, want %d", len(recv), P*W)
	}
	if p, st := peerFailed(recv, P, W, tStatus, pl.rank); p >= 0 {
		return ErrPeer, fmt.Sprintf("rank %d: %s", p, statusText(st))
	}
	pl.rtot, pl.S = make([]int64, P), make([]int64, P)
	var sum int64
	for q := range P {
		t := recv[q*W+tTotal]
		if t < 0 || (fanout >= 0 && t > int64(fanout)*pl.sendN[q]) || t > maxEntries {
			return ErrProtocol, fmt.Sprintf("rank %d returns %d edges for %d nodes (fanout %d)", q, t, pl.sendN[q], fanout)
		}
		pl.rtot[q], pl.S[q] = t, sum
		sum += t
		if sum > maxEntries {
			return ErrTooLarge, fmt.Sprintf("more than %d edges come back", int64(maxEntries))
		}
	}
	if pl.nF+sum > maxEntries {
		return ErrTooLarge, fmt.Sprintf("%d destinations and %d edges exceed %d entries", pl.nF, sum, int64(maxEntries))
	}
	pl.Erecv = sum
	return nil, ""
}

// answerCounts are the int32 all-to-all-v's counts: each answer carries
// its nodes' counts, then their neighbors.
func (pl *plan) answerCounts() (send, recv []int) {
	send, recv = make([]int, pl.P), make([]int, pl.P)
	for p := range pl.P {
		send[p] = int(pl.recvN[p] + pl.tot[p])
		recv[p] = int(pl.sendN[p] + pl.rtot[p])
	}
	return send, recv
}

func ints(x []int64) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}
