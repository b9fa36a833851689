package csp

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

// tagWalk is sample's domain tag for random walks: walk i of a batch uses
// the stream rng.Derive(rng.Derive(seed, tagWalk, epoch, batch), i), one
// draw per step, which is what makes collective walks equal to
// sample.RandomWalk's.
const tagWalk = 0x57414c4b00

// maxWalkLength bounds Walker.Length.
const maxWalkLength = 1 << 16

// Walker draws uniform random walks collectively: each step of walk i moves
// from node v to a uniformly chosen entry of v's row (the patch's
// in-adjacency rows, as sample.RandomWalk on the whole in-adjacency).
//
// Per step a walker travels to the owner of its current node (two
// exchanges: counts with a status word, then the walkers), the owner takes
// the step and keeps the walker; a walker at a node with no neighbors
// stops and travels no further. At the end the visited nodes go back to
// each walk's origin (two exchanges).
type Walker struct {
	base
	length int
}

// NewWalker builds rank c.Rank()'s walker taking length steps per walk.
func NewWalker(c comm.Comm, b *book.Book, p *layout.Patch, length int, m *metrics.Counters) (*Walker, error) {
	bs, err := newBase("Walker.Walk", c, b, p, m)
	if err != nil {
		return nil, err
	}
	if length < 0 || length > maxWalkLength {
		return nil, bs.errf(-1, ErrInput, "length %d not in [0, %d]", length, maxWalkLength)
	}
	return &Walker{base: bs, length: length}, nil
}

// walker record on the wire: origin rank, walk index, stream key, node.
const walkWords = 4

// Walk draws one walk of Length steps from every start (repeats allowed)
// for key, together with the other devices. The result equals
// sample.RandomWalk(whole in-adjacency, starts, Length, key).
func (w *Walker) Walk(ctx context.Context, starts []graph.NodeID, key sample.Key) (*sample.Walks, error) {
	stride := w.length + 1
	status, msg := int64(0), ""
	if int64(len(starts))*int64(stride) > math.MaxInt32 {
		status, msg = 1, "too many walks"
	}
	for i, v := range starts {
		if status == 0 && (v < 0 || int64(v) >= w.n) {
			status, msg = 1, fmt.Sprintf("starts[%d] = %d not in [0, %d)", i, v, w.n)
		}
	}
	out := &sample.Walks{Length: w.length}
	// Walkers held here; they start at their origin.
	var held []int64
	if status == 0 {
		out.Nodes = make([]graph.NodeID, len(starts)*stride)
		bk := rng.Derive(key.Seed, tagWalk, uint64(key.Epoch), uint64(key.Batch))
		for i, v := range starts {
			walk := out.Nodes[i*stride : (i+1)*stride]
			walk[0] = v
			for j := range walk[1:] {
				walk[j+1] = -1
			}
			held = append(held, int64(w.rank), int64(i), int64(rng.Derive(bk, uint64(i))), int64(v))
		}
	}
	// Trace records (walk, step, node), by the walk's origin, kept by the
	// device that took the step and sent home at the end.
	trace := make([][]int64, w.size)
	for t := 1; ; t++ {
		// Shuffle: walkers to the owners of their current nodes. The
		// first header carries the status word.
		sendCounts := make([]int, w.size)
		for j := 0; j < len(held); j += walkWords {
			sendCounts[w.book.Owner(held[j+3])] += walkWords
		}
		packed := make([]int64, len(held))
		next := exchange.Offsets(sendCounts)[:w.size]
		for j := 0; j < len(held); j += walkWords {
			o := w.book.Owner(held[j+3])
			copy(packed[next[o]:], held[j:j+walkWords])
			next[o] += walkWords
		}
		recvCounts, words, err := w.header(ctx, t, status, sendCounts, []int64{int64(t)})
		if err != nil {
			return nil, err
		}
		if status != 0 {
			return nil, w.errf(-1, ErrInput, "%s", msg)
		}
		if err := w.checkHops(t, words); err != nil {
			return nil, err
		}
		if w.length == 0 {
			return out, nil
		}
		recv, err := w.x.I64(ctx, packed, sendCounts, recvCounts)
		if err != nil {
			return nil, w.commErr(t, "walker shuffle", err)
		}
		// Take one step with every walker received; keep those that go on.
		held = held[:0]
		g := w.patch.Graph
		for j := 0; j+walkWords <= len(recv); j += walkWords {
			origin, idx, wk, v := recv[j], recv[j+1], recv[j+2], recv[j+3]
			if origin < 0 || origin >= int64(w.size) || idx < 0 || v < 0 || v >= w.n || !w.patch.Owns(graph.NodeID(v)) {
				return nil, w.errf(t, ErrProtocol, "bad walker (origin %d, walk %d, node %d)", origin, idx, v)
			}
			a, b := g.Indptr[v], g.Indptr[v+1]
			if a == b {
				continue // a dead end: the walk stops (the stop test)
			}
			u := int64(g.Indices[a+int64(rng.Below(rng.Hash(uint64(wk), uint64(t-1)), uint64(b-a)))])
			w.countReads(graph.NodeID(v), 1, false)
			trace[origin] = append(trace[origin], idx, int64(t), u)
			if t < w.length {
				held = append(held, origin, idx, wk, u)
			}
		}
		if t == w.length {
			break
		}
	}
	// Visited nodes go home.
	send := make([]int64, 0)
	sendCounts := make([]int, w.size)
	for o, recs := range trace {
		send = append(send, recs...)
		sendCounts[o] = len(recs)
	}
	recvCounts, err := w.x.Counts(ctx, sendCounts)
	if err != nil {
		return nil, w.commErr(-1, "trace sizes", err)
	}
	recv, err := w.x.I64(ctx, send, sendCounts, recvCounts)
	if err != nil {
		return nil, w.commErr(-1, "traces", err)
	}
	for j := 0; j+3 <= len(recv); j += 3 {
		idx, t, u := recv[j], recv[j+1], recv[j+2]
		if idx < 0 || idx >= int64(len(starts)) || t < 1 || t > int64(w.length) || u < 0 || u >= w.n {
			return nil, w.errf(-1, ErrProtocol, "bad trace record (walk %d, step %d, node %d)", idx, t, u)
		}
		out.Nodes[int(idx)*stride+int(t)] = graph.NodeID(u)
	}
	return out, nil
}
