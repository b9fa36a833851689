package csp

import (
	"math"
	"slices"
	"sort"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/internal/exchange"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
)

// Domain tags of the layer-wise streams.
const (
	tagLayerNode  = 0x4c41594e // "LAYN": a frontier node's neighbor draws
	tagLayerAlloc = 0x4c415941 // "LAYA": the requester's allocation of a layer
)

// maxLayerFanout bounds a layer's edge budget so a typo cannot allocate
// the machine away.
const maxLayerFanout = 1 << 24

// LayerSampler is one device's layer-wise collective sampler (see the
// package documentation). It implements sample.Sampler and
// sample.HopSampler; every call is a collective.
//
// Per hop it makes five exchanges: the header with counts, the frontier
// (shuffle), each frontier node's degree and weight back to the requester,
// the number of draws allotted to each node, and the drawn neighbors and
// edge IDs (reshuffle).
type LayerSampler struct {
	hopSampler
}

// NewLayerSampler builds rank c.Rank()'s layer-wise sampler. Fanouts[hop]
// is the number of edges drawn for the whole layer (-1: every edge of the
// frontier). Weighted sampling needs edge weights and replacement.
func NewLayerSampler(c comm.Comm, b *book.Book, p *layout.Patch, cfg Config, m *metrics.Counters) (*LayerSampler, error) {
	const op = "LayerSampler"
	bs, err := newBase(op, c, b, p, m)
	if err != nil {
		return nil, err
	}
	if len(cfg.Fanouts) == 0 {
		return nil, bs.errf(-1, ErrInput, "no fanouts")
	}
	for i, f := range cfg.Fanouts {
		if f != -1 && (f <= 0 || f > maxLayerFanout) {
			return nil, bs.errf(-1, ErrInput, "fanouts[%d] = %d: want -1 or 1..%d", i, f, maxLayerFanout)
		}
	}
	if cfg.Weighted {
		if !cfg.Replace {
			return nil, bs.errf(-1, ErrInput, "weighted layer-wise sampling is with replacement only")
		}
		if p.Graph.Weights == nil {
			return nil, bs.errf(-1, ErrInput, "weighted sampling needs edge weights")
		}
		for e, w := range p.Graph.Weights {
			if !(w >= 0) || math.IsInf(float64(w), 1) {
				return nil, bs.errf(-1, ErrInput, "edge %d of the patch has weight %v", e, w)
			}
		}
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &LayerSampler{hopSampler{base: bs, cfg: cfg, sampleOp: "LayerSampler.Sample"}}
	s.blocks = sample.NewBlockSampler(s)
	return s, nil
}

// SampleHop runs one collective layer-wise hop over the frontier dst.
func (s *LayerSampler) SampleHop(dst []graph.NodeID, hop int, key sample.Key) (*sample.Neighbors, error) {
	// 1. Shuffle the frontier to the owners.
	f, err := s.shuffle(dst, hop, key)
	if err != nil {
		return nil, err
	}
	ctx, pos, sendCounts, recv, recvCounts, words := f.ctx, f.pos, f.sendCounts, f.recv, f.recvCounts, f.words

	// 2. Owners answer each node's degree and weight (float64 bits).
	g := s.patch.Graph
	info := make([]int64, 2*len(recv))
	for i, v := range recv {
		a, b := g.Indptr[v], g.Indptr[v+1]
		info[2*i] = b - a
		if s.cfg.Weighted {
			var w float64
			for _, x := range g.Weights[a:b] {
				w += float64(x)
			}
			info[2*i+1] = int64(math.Float64bits(w))
		}
	}
	back, err := s.x.I64(ctx, info, exchange.Scale(recvCounts, 2), exchange.Scale(sendCounts, 2))
	if err != nil {
		return nil, s.commErr(hop, "degrees", err)
	}
	deg := make([]int64, len(dst))
	wt := make([]float64, len(dst))
	for i := range dst {
		j := pos[i]
		deg[i] = back[2*j]
		if deg[i] < 0 {
			return nil, s.errf(hop, ErrProtocol, "node %d has degree %d", dst[i], deg[i])
		}
		if s.cfg.Weighted {
			wt[i] = math.Float64frombits(uint64(back[2*j+1]))
			if !(wt[i] >= 0) || math.IsInf(wt[i], 1) {
				return nil, s.errf(hop, ErrProtocol, "node %d has weight %v", dst[i], wt[i])
			}
		} else {
			wt[i] = float64(deg[i])
		}
	}

	// 3. The requester allots the layer's draws to its frontier.
	alloc := s.allocate(key, hop, deg, wt)
	allocSend := make([]int64, len(dst))
	var total int64
	for i := range dst {
		allocSend[pos[i]] = alloc[i]
		total += alloc[i]
	}
	got, err := s.x.I64(ctx, allocSend, sendCounts, recvCounts)
	if err != nil {
		return nil, s.commErr(hop, "allocation", err)
	}

	// 4. Owners draw, 5. and send neighbors and edge IDs back.
	replySend := make([]int64, 0)
	replyCounts := make([]int, s.size)
	off := 0
	for p, c := range recvCounts {
		start := len(replySend)
		pk := keyFrom(words[p])
		nodeKey := rng.Derive(pk.Seed, tagLayerNode, uint64(pk.Epoch), uint64(pk.Batch), uint64(hop))
		var nodes, eids []int64
		for i, v := range recv[off : off+c] {
			k := got[off+i]
			d := s.patch.Degree(v)
			if k < 0 || (k > 0 && d == 0) || (!s.cfg.Replace && k > d) || k > maxLayerFanout {
				return nil, s.errf(hop, ErrProtocol, "rank %d asked for %d draws from node %d of degree %d", p, k, v, d)
			}
			if k == 0 {
				continue
			}
			if s.cfg.Weighted && !positive(g.Weights[g.Indptr[v]:g.Indptr[v+1]]) {
				return nil, s.errf(hop, ErrProtocol, "rank %d asked for %d draws from node %d whose weights are all 0", p, k, v)
			}
			nodes, eids = s.draw(v, k, rng.Derive(nodeKey, uint64(v)), nodes, eids)
			s.countReads(v, k, s.cfg.Weighted)
		}
		off += c
		replySend = append(replySend, nodes...)
		replySend = append(replySend, eids...)
		replyCounts[p] = len(replySend) - start
	}
	// The requester knows what it asked of each owner.
	backCounts := make([]int, s.size)
	for i, v := range dst {
		backCounts[s.book.Owner(int64(v))] += 2 * int(alloc[i])
	}
	ans, err := s.x.I64(ctx, replySend, replyCounts, backCounts)
	if err != nil {
		return nil, s.commErr(hop, "reshuffle", err)
	}
	return s.assemble(hop, dst, pos, sendCounts, alloc, ans, backCounts, total)
}

// allocate splits the layer's budget over the frontier (LayerAllocate).
func (s *LayerSampler) allocate(key sample.Key, hop int, deg []int64, wt []float64) []int64 {
	return LayerAllocate(s.cfg.Fanouts[hop], s.cfg.Replace, key, hop, deg, wt)
}

// draw appends k in-neighbors of v (and their global edge IDs) drawn with
// the stream key: uniform or weighted with replacement (draw order),
// uniform without replacement by Floyd's algorithm (row order).
func (s *LayerSampler) draw(v graph.NodeID, k int64, key uint64, nodes, eids []int64) ([]int64, []int64) {
	g := s.patch.Graph
	a, b := g.Indptr[v], g.Indptr[v+1]
	d := b - a
	st := rng.NewStream(key)
	emit := func(pos int64) {
		nodes = append(nodes, int64(g.Indices[a+pos]))
		eids = append(eids, s.patch.EdgeBase+a+pos)
	}
	switch {
	case s.cfg.Weighted:
		ws := g.Weights[a:b]
		cum := make([]float64, len(ws))
		var sum float64
		for i, w := range ws {
			sum += float64(w)
			cum[i] = sum
		}
		for range k {
			u := (1 - st.OpenFloat64()) * sum
			i := sort.Search(len(cum), func(i int) bool { return cum[i] > u })
			if i == len(cum) {
				i = len(cum) - 1
				for ws[i] == 0 {
					i--
				}
			}
			emit(int64(i))
		}
	case s.cfg.Replace:
		for range k {
			emit(int64(st.Below(uint64(d))))
		}
	case k == d:
		for pos := range d {
			emit(pos)
		}
	default:
		chosen := make(map[int64]struct{}, k)
		for j := d - k; j < d; j++ {
			t := int64(st.Below(uint64(j + 1)))
			if _, dup := chosen[t]; dup {
				t = j
			}
			chosen[t] = struct{}{}
		}
		sel := make([]int64, 0, k)
		for t := range chosen {
			sel = append(sel, t)
		}
		slices.Sort(sel)
		for _, pos := range sel {
			emit(pos)
		}
	}
	return nodes, eids
}

// assemble puts the owners' answers ([neighbors][edge IDs] per owner, in
// the order of the nodes it was sent) back in dst's order.
func (s *LayerSampler) assemble(hop int, dst []graph.NodeID, pos []int, sendCounts []int, alloc []int64, ans []int64, backCounts []int, total int64) (*sample.Neighbors, error) {
	sendOff := exchange.Offsets(sendCounts)
	backOff := exchange.Offsets(backCounts)
	// start of each packed node's neighbors within its owner's section
	start := make([]int64, len(dst))
	for i := range dst {
		start[pos[i]] = alloc[i]
	}
	for o := range s.size {
		var sum int64
		for j := sendOff[o]; j < sendOff[o+1]; j++ {
			k := start[j]
			start[j] = sum
			sum += k
		}
	}
	nb := &sample.Neighbors{Indptr: make([]int64, len(dst)+1), Nodes: make([]graph.NodeID, total), EdgeIDs: make([]int64, total)}
	var at int64
	for i, v := range dst {
		o := s.book.Owner(int64(v))
		half := int64(backCounts[o] / 2)
		src := int64(backOff[o]) + start[pos[i]]
		for e := range alloc[i] {
			u := ans[src+e]
			if u < 0 || u >= s.n {
				return nil, s.errf(hop, ErrProtocol, "rank %d sent neighbor %d", o, u)
			}
			nb.Nodes[at+e] = graph.NodeID(u)
			nb.EdgeIDs[at+e] = ans[src+half+e]
		}
		at += alloc[i]
		nb.Indptr[i+1] = at
	}
	return nb, nil
}

func positive(ws []float32) bool {
	for _, w := range ws {
		if w > 0 {
			return true
		}
	}
	return false
}
