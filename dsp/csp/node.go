package csp

import (
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

// Config configures node-wise and layer-wise samplers. Fanouts are listed
// seeds' hop first, as in sample.Config; -1 takes every neighbor (node-wise)
// or every edge of the frontier (layer-wise).
type Config struct {
	Fanouts []int
	// Replace draws with replacement.
	Replace bool
	// Weighted draws proportionally to the graph's edge weights.
	Weighted bool
	// Workers is the number of goroutines of the local sampling pass (0:
	// GOMAXPROCS); it never changes the result.
	Workers int
}

// NodeSampler is one device's node-wise collective sampler. It implements
// sample.Sampler and sample.HopSampler, but every call is a collective:
// all devices must call Sample (or SampleContext) together. Its batches
// equal sample.NeighborSampler's on the whole graph, byte for byte.
type NodeSampler struct {
	hopSampler
	local *sample.NeighborSampler
}

// NewNodeSampler builds rank c.Rank()'s sampler over its patch. b is the
// partition book (the same on every device); m, when not nil, receives
// the byte counts.
func NewNodeSampler(c comm.Comm, b *book.Book, p *layout.Patch, cfg Config, m *metrics.Counters) (*NodeSampler, error) {
	const op = "NodeSampler"
	bs, err := newBase(op, c, b, p, m)
	if err != nil {
		return nil, err
	}
	local, err := sample.NewNeighborSampler(p.Graph, sample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: cfg.Workers})
	if err != nil {
		return nil, &Error{Rank: bs.rank, Op: op, Hop: -1, Msg: "local sampler", Err: err}
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &NodeSampler{hopSampler: hopSampler{base: bs, cfg: cfg, sampleOp: "NodeSampler.Sample"}, local: local}
	s.blocks = sample.NewBlockSampler(s)
	return s, nil
}

// SampleHop runs one collective hop: the in-neighbors of dst (global IDs,
// any order, repeats allowed) at hop, with the draws of key. It is called
// by the block builder of SampleContext; calling it directly is also a
// collective.
func (s *NodeSampler) SampleHop(dst []graph.NodeID, hop int, key sample.Key) (*sample.Neighbors, error) {
	// Shuffle: frontier nodes to their owners.
	f, err := s.shuffle(dst, hop, key)
	if err != nil {
		return nil, err
	}
	ctx, recv, recvCounts, words := f.ctx, f.recv, f.recvCounts, f.words

	// Sample: every requester's nodes under its own key.
	replySend := make([]int64, 0)
	replyCounts := make([]int, s.size)
	off := 0
	for p, c := range recvCounts {
		seg := recv[off : off+c]
		off += c
		if c == 0 {
			continue
		}
		nb, err := s.local.SampleHop(seg, hop, keyFrom(words[p]))
		if err != nil {
			return nil, s.errf(hop, ErrInput, "local sampling for rank %d: %v", p, err)
		}
		start := len(replySend)
		for i, v := range seg {
			k := nb.Indptr[i+1] - nb.Indptr[i]
			replySend = append(replySend, k)
			s.countReads(v, k, s.cfg.Weighted)
		}
		for _, u := range nb.Nodes {
			replySend = append(replySend, int64(u))
		}
		for _, e := range nb.EdgeIDs {
			replySend = append(replySend, e+s.patch.EdgeBase)
		}
		replyCounts[p] = len(replySend) - start
	}

	// Reshuffle: neighbors back to the requesters.
	backCounts, err := s.x.Counts(ctx, replyCounts)
	if err != nil {
		return nil, s.commErr(hop, "reshuffle sizes", err)
	}
	back, err := s.x.I64(ctx, replySend, replyCounts, backCounts)
	if err != nil {
		return nil, s.commErr(hop, "reshuffle", err)
	}
	return s.assemble(hop, dst, f.pos, f.sendCounts, back, backCounts)
}

// assemble puts the owners' answers back in dst's order. Owner o's answer
// is [k per node it got][neighbors][edge IDs].
func (s *NodeSampler) assemble(hop int, dst []graph.NodeID, pos []int, sendCounts []int, back []int64, backCounts []int) (*sample.Neighbors, error) {
	sendOff := exchange.Offsets(sendCounts)
	backOff := exchange.Offsets(backCounts)
	// Per owner: where each of its nodes' neighbors start in its answer.
	start := make([]int64, len(pos)) // by packed position
	nodesAt := make([]int, s.size)   // offset of the neighbor section in back
	total := int64(0)
	for o := range s.size {
		ans := back[backOff[o]:backOff[o+1]]
		c := sendCounts[o]
		if len(ans) < c {
			return nil, s.errf(hop, ErrProtocol, "rank %d answered %d words for %d nodes", o, len(ans), c)
		}
		var sum int64
		for j, k := range ans[:c] {
			if k < 0 {
				return nil, s.errf(hop, ErrProtocol, "rank %d sampled %d neighbors", o, k)
			}
			start[sendOff[o]+j] = sum
			sum += k
		}
		if int64(len(ans)) != int64(c)+2*sum {
			return nil, s.errf(hop, ErrProtocol, "rank %d answered %d words for %d nodes and %d neighbors", o, len(ans), c, sum)
		}
		nodesAt[o] = backOff[o] + c
		total += sum
	}
	nb := &sample.Neighbors{Indptr: make([]int64, len(dst)+1), Nodes: make([]graph.NodeID, total), EdgeIDs: make([]int64, total)}
	var at int64
	for i, v := range dst {
		o := s.book.Owner(int64(v))
		j := pos[i] // packed position
		k := back[backOff[o]+(j-sendOff[o])]
		src := int64(nodesAt[o]) + start[j]
		sum := int64(backOff[o+1]-nodesAt[o]) / 2 // neighbors in o's answer
		for e := int64(0); e < k; e++ {
			u := back[src+e]
			if u < 0 || u >= s.n {
				return nil, s.errf(hop, ErrProtocol, "rank %d sent neighbor %d", o, u)
			}
			nb.Nodes[at+e] = graph.NodeID(u)
			nb.EdgeIDs[at+e] = back[src+sum+e]
		}
		at += k
		nb.Indptr[i+1] = at
	}
	return nb, nil
}
