package csp

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

// base is what every collective sampler holds.
type base struct {
	op         string
	x          exchange.Exchanger
	book       *book.Book
	patch      *layout.Patch
	m          *metrics.Counters
	rank, size int
	n          int64 // number of nodes
}

func newBase(op string, c comm.Comm, b *book.Book, p *layout.Patch, m *metrics.Counters) (base, error) {
	bad := func(format string, args ...any) (base, error) {
		return base{}, &Error{Rank: -1, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	if c == nil || b == nil || p == nil {
		return bad("nil communicator, book or patch")
	}
	if c.Size() != b.K() {
		return bad("communicator has %d ranks, book %d parts", c.Size(), b.K())
	}
	if p.Rank != c.Rank() {
		return bad("patch of rank %d given to rank %d", p.Rank, c.Rank())
	}
	lo, hi := b.Range(c.Rank())
	if int64(p.Lo) != lo || int64(p.Hi) != hi || p.Graph.NumRows != b.NumNodes() {
		return bad("patch [%d, %d) of %d nodes does not match the book's range [%d, %d) of %d", p.Lo, p.Hi, p.Graph.NumRows, lo, hi, b.NumNodes())
	}
	return base{op: op, x: exchange.Exchanger{C: c, M: m, Purpose: metrics.Sample}, book: b, patch: p, m: m,
		rank: c.Rank(), size: c.Size(), n: b.NumNodes()}, nil
}

func (s *base) errf(hop int, kind error, format string, args ...any) *Error {
	return &Error{Rank: s.rank, Op: s.op, Hop: hop, Msg: fmt.Sprintf(format, args...), Err: kind}
}

func (s *base) commErr(hop int, what string, err error) *Error {
	return &Error{Rank: s.rank, Op: s.op, Hop: hop, Msg: what, Err: err}
}

// header is the first exchange of a step: every rank tells each peer its
// status (0 = fine), how many items it will send it, and extra words that
// must agree (e.g. the hop) or describe the request (e.g. the key). It
// returns the counts to receive and, per peer, its extra words. A peer with
// a non-zero status makes every rank fail with ErrPeer; a local failure
// (status != 0) is reported by the caller.
func (s *base) header(ctx context.Context, hop int, status int64, counts []int, extra []int64) ([]int, [][]int64, error) {
	w := 2 + len(extra)
	send := make([]int64, s.size*w)
	for p := range s.size {
		row := send[p*w : (p+1)*w]
		row[0] = status
		if counts != nil {
			row[1] = int64(counts[p])
		}
		copy(row[2:], extra)
	}
	recv, err := s.x.Fixed(ctx, send, w)
	if err != nil {
		return nil, nil, s.commErr(hop, "header exchange", err)
	}
	if status != 0 {
		return nil, nil, nil // the caller returns its own error
	}
	var failed []int
	rc := make([]int, s.size)
	words := make([][]int64, s.size)
	for p := range s.size {
		row := recv[p*w : (p+1)*w]
		if row[0] != 0 {
			failed = append(failed, p)
			continue
		}
		if row[1] < 0 || row[1] > math.MaxInt32 {
			return nil, nil, s.errf(hop, ErrProtocol, "rank %d announced %d items", p, row[1])
		}
		rc[p] = int(row[1])
		words[p] = row[2:]
	}
	if failed != nil {
		return nil, nil, s.errf(hop, ErrPeer, "ranks %v reported invalid input", failed)
	}
	return rc, words, nil
}

// route groups nodes by owner, keeping their order within each owner: it
// returns the nodes packed in rank order, the count per rank, and the
// position of every input node in the packed order.
func (s *base) route(nodes []graph.NodeID) (packed []int32, counts []int, pos []int) {
	counts = make([]int, s.size)
	owner := make([]int32, len(nodes))
	for i, v := range nodes {
		o := s.book.Owner(int64(v))
		owner[i] = int32(o)
		counts[o]++
	}
	next := exchange.Offsets(counts)[:s.size]
	packed = make([]int32, len(nodes))
	pos = make([]int, len(nodes))
	for i, v := range nodes {
		o := owner[i]
		pos[i] = next[o]
		packed[next[o]] = v
		next[o]++
	}
	return packed, counts, pos
}

// checkOwned verifies that every node a peer sent is one of our rows.
func (s *base) checkOwned(hop int, recv []int32, recvCounts []int) error {
	off := 0
	for p, c := range recvCounts {
		for _, v := range recv[off : off+c] {
			if !s.patch.Owns(v) {
				return s.errf(hop, ErrProtocol, "rank %d sent node %d, which rank %d does not own ([%d, %d))", p, v, s.rank, s.patch.Lo, s.patch.Hi)
			}
		}
		off += c
	}
	return nil
}

// countReads books the topology bytes read to sample k entries of row v
// on the link where the row lives.
func (s *base) countReads(v graph.NodeID, k int64, weighted bool) {
	if s.m == nil {
		return
	}
	l := metrics.Local
	if s.patch.Place(v) == layout.Host {
		l = metrics.Host
	}
	s.m.AddBytes(metrics.Sample, l, s.patch.ReadBytes(k, weighted))
}

// checkSeeds validates seeds: in range and distinct.
func checkSeeds(seeds []graph.NodeID, n int64) (string, bool) {
	for i, v := range seeds {
		if v < 0 || int64(v) >= n {
			return fmt.Sprintf("seeds[%d] = %d not in [0, %d)", i, v, n), false
		}
	}
	sorted := slices.Clone(seeds)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return fmt.Sprintf("seed %d appears twice", sorted[i]), false
		}
	}
	return "", true
}

// keyWords and keyFrom carry a sample.Key in header words.
func keyWords(k sample.Key, hop int) []int64 {
	return []int64{int64(hop), int64(k.Seed), int64(k.Epoch), int64(k.Batch)}
}

func keyFrom(w []int64) sample.Key {
	return sample.Key{Seed: uint64(w[1]), Epoch: int(w[2]), Batch: int(w[3])}
}

// checkHops verifies that every peer is at the same hop.
func (s *base) checkHops(hop int, words [][]int64) error {
	for p, w := range words {
		if w[0] != int64(hop) {
			return s.errf(hop, ErrProtocol, "rank %d is at hop %d", p, w[0])
		}
	}
	return nil
}

// hopSampler is what the node-wise and layer-wise samplers share: the
// sample.Sampler side (the block builder calls the outer sampler's
// SampleHop) and the first step of every hop, which validates the frontier
// and shuffles it to its owners. The outer samplers keep only their
// per-hop sampling rule.
type hopSampler struct {
	base
	cfg      Config
	sampleOp string          // Op of the errors of Sample and SampleHop
	blocks   sample.Sampler  // set by the outer sampler, over itself
	ctx      context.Context // of the Sample call in progress
}

// NumNodes is the number of nodes of the whole graph.
func (s *hopSampler) NumNodes() int64 { return s.n }

// NumHops is the number of hops (blocks) per batch.
func (s *hopSampler) NumHops() int { return len(s.cfg.Fanouts) }

// Sample is SampleContext without a context (the communicator's default
// deadline applies to each collective).
func (s *hopSampler) Sample(seeds []graph.NodeID, key sample.Key) (*sample.MiniBatch, error) {
	return s.SampleContext(context.Background(), seeds, key)
}

// SampleContext draws the MiniBatch of seeds (distinct, in [0, NumNodes))
// for key, together with the other devices. The result depends only on
// the graph, the seeds, the key and the config, not on the partition.
func (s *hopSampler) SampleContext(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*sample.MiniBatch, error) {
	s.op = s.sampleOp
	if msg, ok := checkSeeds(seeds, s.n); !ok {
		// Take part in the first exchange so the peers learn of it.
		if _, _, err := s.header(ctx, 0, 1, nil, keyWords(key, 0)); err != nil {
			return nil, err
		}
		return nil, s.errf(-1, ErrInput, "%s", msg)
	}
	s.ctx = ctx
	defer func() { s.ctx = nil }()
	return s.blocks.Sample(seeds, key)
}

// frontier is one hop after the shuffle: the requester's routing of its
// frontier and, as owner, the nodes the peers asked of it.
type frontier struct {
	ctx        context.Context
	pos        []int     // packed position of each frontier node
	sendCounts []int     // frontier nodes sent to each owner
	recv       []int32   // nodes received, grouped by peer
	recvCounts []int     // nodes received from each peer
	words      [][]int64 // each peer's header words (hop and key)
}

// shuffle validates hop and dst (global IDs, any order, repeats allowed)
// and sends every frontier node to its owner; a local input error still
// takes part in the header exchange so the peers learn of it.
func (s *hopSampler) shuffle(dst []graph.NodeID, hop int, key sample.Key) (*frontier, error) {
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if hop < 0 || hop >= len(s.cfg.Fanouts) {
		s.header(ctx, hop, 1, nil, keyWords(key, hop))
		return nil, s.errf(hop, ErrInput, "hop %d not in [0, %d)", hop, len(s.cfg.Fanouts))
	}
	for i, v := range dst {
		if v < 0 || int64(v) >= s.n {
			s.header(ctx, hop, 1, nil, keyWords(key, hop))
			return nil, s.errf(hop, ErrInput, "dst[%d] = %d not in [0, %d)", i, v, s.n)
		}
	}
	packed, sendCounts, pos := s.route(dst)
	recvCounts, words, err := s.header(ctx, hop, 0, sendCounts, keyWords(key, hop))
	if err != nil {
		return nil, err
	}
	if err := s.checkHops(hop, words); err != nil {
		return nil, err
	}
	recv, err := s.x.I32(ctx, packed, sendCounts, recvCounts)
	if err != nil {
		return nil, s.commErr(hop, "shuffle", err)
	}
	if err := s.checkOwned(hop, recv, recvCounts); err != nil {
		return nil, err
	}
	return &frontier{ctx: ctx, pos: pos, sendCounts: sendCounts, recv: recv, recvCounts: recvCounts, words: words}, nil
}
