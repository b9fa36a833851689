package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TypedConfig configures a TypedSampler: Fanouts (one list per
// relation, one entry per hop, seeds' hop first; -1 all, 0 none),
// Replace and Weighted mean what they mean in sample.HeteroConfig;
// EdgeIDs and Placement what they mean in Config. Every rank passes the
// same.
type TypedConfig struct {
	Fanouts           [][]int
	Replace, Weighted bool
	EdgeIDs           bool
	Placement         gpusample.Placement
}

// TypedSampler is one rank's collective typed sampler: heterogeneous
// node-wise sampling with a fanout per relation and hop (what
// sample.HeteroSampler draws on one device), the graph spread over the
// ranks. Every node type has its own contiguous partition of its IDs;
// for every relation, a rank holds the in-adjacency rows of the
// destinations it owns (a layout.Patch of the relation, square over
// max(destinations, sources) IDs, the padding rows empty).
//
// The algorithm is sample.SampleTyped; this sampler is its machine.
// Its draw of a hop's relations is the node-wise protocol's hop without
// its relabeling (proto.draw's steps, on each relation's Machine), for
// all of them in one exchange per phase (typedhop.go): the frontier of
// each relation's destination type goes to its owners, they draw with
// the per-node body and the relation's stream that sample.HeteroSampler
// uses, and the answers come back in frontier order. Every rank draws every relation
// sampled at a hop, even with an empty frontier of its type (the
// exchange is a collective; sample.EmptyDrawer). Relabel for node type t
// is local: the type's frontier followed by its relations' sources,
// relation order, deduplicated by the Machine's Relabel. So the batch
// equals sample.HeteroSampler's over the whole graph with the same seeds
// and key (byte for byte; EdgeIDs too with TypedConfig.EdgeIDs), for any
// number of ranks and any partitions.
//
// Sizes come back per step: every relation's edge count after a hop's
// draws (at fixed fanouts, one read), a type's source count after its
// relabel. The batch is returned on the host.
//
// Failures follow the node-wise protocol's: invalid seeds and a
// failure before a hop's header (a previous relabel, the tail of a
// previous hop's draws, a routing failure) are reported in that header,
// so every rank fails at the same hop (the others with ErrPeer); see
// the package doc.
type TypedSampler struct {
	member
	cfg      TypedConfig
	numNodes []int64
	rels     []sample.Relation
	fanouts  [][]int
	hops     int
	per      []*typedRel // per relation; nil where every fanout is 0
	first    *typedRel   // the first sampled relation: uploads, relabels, reads
	nRel     int         // relations with a side (per[r] != nil)
	ctl      backend.Buffer
	host     *cpu.Backend
}

// typedRel is one relation's side of a rank: the node-wise protocol over
// the relation's patch (p.m its machine).
type typedRel struct{ p *proto }

// NewTyped prepares rank c.Rank()'s typed sampler on be: numNodes gives
// every node type's node count, rels the relations over the whole
// graph (shared, not copied; this rank keeps its destination rows),
// offsets one partition per node type (len P+1 each, offsets[t][P] ==
// numNodes[t]; contiguous ranges), c the sampling communicator (nil or
// Size() == 1: one device). At least one relation must be sampled at
// some hop.
func NewTyped(be backend.Backend, numNodes []int64, rels []sample.Relation, offsets [][]int64, c comm.Comm, cfg TypedConfig) (*TypedSampler, error) {
	const op = "csp.NewTyped"
	rank, size := groupOf(c)
	bad := func(format string, args ...any) (*TypedSampler, error) {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	// sample.NewHeteroSampler's checks: types, relations, fanouts.
	hs, err := sample.NewHeteroSampler(numNodes, rels, sample.HeteroConfig{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: 1})
	if err != nil {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Err: fmt.Errorf("%w: %w", ErrInput, err)}
	}
	if hs.NumHops() > maxHops {
		return bad("%d hops: at most %d", hs.NumHops(), maxHops)
	}
	if size > maxRanks {
		return bad("%d ranks: at most %d", size, maxRanks)
	}
	if len(offsets) != len(numNodes) {
		return bad("%d partitions for %d node types", len(offsets), len(numNodes))
	}
	for t, off := range offsets {
		b, err := book.New(off)
		if err != nil {
			return bad("offsets of node type %d: %v", t, err)
		}
		if b.K() != size || b.NumNodes() != numNodes[t] {
			return bad("offsets of node type %d: %d parts of %d nodes, want %d parts (the communicator's ranks) of %d", t, b.K(), b.NumNodes(), size, numNodes[t])
		}
	}
	host, msg := backendOf(be)
	if msg != "" {
		return bad("%s", msg)
	}
	s := &TypedSampler{cfg: cfg, numNodes: slices.Clone(numNodes), rels: slices.Clone(rels), hops: hs.NumHops(), per: make([]*typedRel, len(rels)), host: host}
	s.be, s.rank, s.size = be, rank, size
	s.fanouts = make([][]int, len(rels))
	for r, rel := range rels {
		s.fanouts[r] = slices.Clone(cfg.Fanouts[r])
		if !slices.ContainsFunc(s.fanouts[r], func(k int) bool { return k != 0 }) {
			continue
		}
		tr, err := s.openRel(rel, offsets[rel.Dst], s.fanouts[r], c)
		if err != nil {
			s.Close()
			var ge *Error
			if errors.As(err, &ge) {
				return nil, err
			}
			return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: fmt.Sprintf("relation %d", r), Err: err}
		}
		s.per[r] = tr
		s.nRel++
		if s.first == nil {
			s.first = tr
		}
	}
	if s.first == nil {
		return bad("no relation is sampled at any hop")
	}
	// The batched hop's control words (typedCtl), allocated once so that
	// a hop's headers never wait on an allocation.
	if s.ctl, err = s.first.p.alloc(nil, backend.Int64, typedCtl{size, s.nRel}.words()); err != nil {
		s.Close()
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: "allocating the control words", Err: err}
	}
	s.cfg.Fanouts = s.fanouts
	return s, nil
}

// openRel opens relation rel's side: its patch over the destination
// type's partition off (the last range also holds the padding rows of
// the square view) and its protocol at fanouts fan (hops at 0 never
// draw; the machine gets 1 there).
func (s *TypedSampler) openRel(rel sample.Relation, off []int64, fan []int, c comm.Comm) (*typedRel, error) {
	g := sample.SquareView(rel.In)
	o := slices.Clone(off)
	o[len(o)-1] = g.NumRows
	b, err := book.New(o)
	if err != nil {
		return nil, err
	}
	patch, err := layout.Build(g, b, s.rank, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	nf := slices.Clone(fan)
	for h := range nf {
		if nf[h] == 0 {
			nf[h] = 1
		}
	}
	cfg := Config{Fanouts: nf, Replace: s.cfg.Replace, Weighted: s.cfg.Weighted, EdgeIDs: s.cfg.EdgeIDs, Placement: s.cfg.Placement}
	p := newProto(s.be, c, b, s.rank, &s.stats, len(nf))
	p.fan, p.edgeIDs = nf, cfg.EdgeIDs
	var m SamplerMachine
	if s.host != nil {
		m, err = newCPUSamplerMachine(s.host, patch, p.off, s.size, cfg)
	} else {
		m, err = device.Sampler(s.be, patch, p.off, s.size, cfg)
	}
	if err != nil {
		if errors.Is(err, sample.ErrConfig) || errors.Is(err, sample.ErrGraph) {
			err = fmt.Errorf("%w: %w", ErrInput, err)
		}
		return nil, err
	}
	if err := p.setMachine(m); err != nil {
		m.Close()
		return nil, err
	}
	return &typedRel{p: p}, nil
}

// NumHops is the number of blocks per batch.
func (s *TypedSampler) NumHops() int { return s.hops }

// NumTypes is the number of node types.
func (s *TypedSampler) NumTypes() int { return len(s.numNodes) }

// Close releases the relations' patches and buffers (not the
// communicator, nor batches already returned).
func (s *TypedSampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	if s.ctl != nil {
		s.first.p.m.Free(s.ctl)
		s.ctl = nil
	}
	for _, tr := range s.per {
		if tr != nil {
			if err := tr.p.close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Sample draws the typed neighborhoods of seeds, distinct nodes of type
// seedType (any nodes, not only this rank's), with key. It is a
// collective: every rank calls it the same number of times in the same
// order (seed counts may differ, including 0). The batch equals
// sample.HeteroSampler.Sample's over the whole graph.
func (s *TypedSampler) Sample(ctx context.Context, seedType int, seeds []graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	typed := make([][]graph.NodeID, len(s.numNodes))
	var bad error
	if seedType < 0 || seedType >= len(s.numNodes) {
		bad = fmt.Errorf("seed type %d not in [0, %d)", seedType, len(s.numNodes))
	} else {
		typed[seedType] = seeds
	}
	return s.sample(ctx, typed, key, bad)
}

// SampleTypes is Sample with seeds of several types: seeds[t] lists
// distinct nodes of type t (nil for none), as
// sample.HeteroSampler.SampleTypes.
func (s *TypedSampler) SampleTypes(ctx context.Context, seeds [][]graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	var bad error
	if len(seeds) != len(s.numNodes) {
		bad = fmt.Errorf("%d seed lists for %d node types", len(seeds), len(s.numNodes))
		seeds = make([][]graph.NodeID, len(s.numNodes))
	}
	return s.sample(ctx, seeds, key, bad)
}

// sample runs sample.SampleTyped on this rank's machine; bad (invalid
// arguments) is reported to the peers in the first header.
func (s *TypedSampler) sample(ctx context.Context, seeds [][]graph.NodeID, key sample.Key, bad error) (*sample.HeteroMiniBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.first.p.errf(-1, ErrInput, "sampler is closed")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	m := &typedMachine{s: s, ctx: ctx}
	defer m.free()
	if bad == nil {
		for t, ids := range seeds {
			if err := checkSeeds(ids, s.numNodes[t]); err != nil {
				bad = fmt.Errorf("seeds of node type %d: %w", t, err)
				break
			}
		}
	}
	if bad != nil {
		m.status, m.carried = stInput, s.first.p.errf(0, ErrInput, "%v", bad)
	}
	dst := make([]tNodes, len(s.numNodes))
	for t, ids := range seeds {
		if m.status != stOK {
			break
		}
		var err error
		if dst[t], err = m.upload(ids); err != nil {
			m.status, m.carried = stFailed, s.first.p.wrapErr(0, "uploading the seeds", err)
		}
	}
	hops, err := sample.SampleTyped(m, s.rels, s.fanouts, dst, key)
	if err == nil && m.carried != nil {
		err = m.carried // the last hop's tail failed: no header left to tell the peers
	}
	if err != nil {
		return nil, s.first.p.wrapErr(-1, "typed sampling", err)
	}
	mb, err := m.download(seeds, hops)
	if err != nil {
		return nil, s.first.p.wrapErr(len(hops)-1, "reading the blocks", err)
	}
	s.stats.Batches++
	return mb, nil
}

// tNodes is the typed machine's node list: n int32 IDs in b (a buffer of
// at least one element, so that empty lists are buffers too).
type tNodes struct {
	b backend.Buffer
	n int64
}

// tRel is one relation's sampled edges of a hop: nd+1 row offsets ptr,
// e sources src (global IDs) and edge IDs eid; local holds the sources'
// positions after the relabel (nil while e == 0).
type tRel struct {
	nd, e    int64
	ptr      backend.Buffer
	src, eid backend.Buffer
	local    backend.Buffer
}

// typedMachine is the sample.TypedMachine of one collective batch: it
// owns every buffer it makes until free. status and carried are the
// failure the next relation's header reports (as proto.step's).
type typedMachine struct {
	s       *TypedSampler
	ctx     context.Context
	bufs    []owned
	status  int64
	carried error
}

// owned is a buffer and the machine that made it (which frees it).
type owned struct {
	m Machine
	b backend.Buffer
}

var (
	_ sample.TypedMachine[tNodes, *tRel] = (*typedMachine)(nil)
	_ sample.EmptyDrawer                 = (*typedMachine)(nil)
	_ sample.HopDrawer[tNodes, *tRel]    = (*typedMachine)(nil)
)

// DrawsEmpty: every rank takes part in every relation's exchange.
func (m *typedMachine) DrawsEmpty() bool { return true }

// keep records buffers of mm until the batch ends.
func (m *typedMachine) keep(mm Machine, bs ...backend.Buffer) {
	for _, b := range bs {
		if b != nil {
			m.bufs = append(m.bufs, owned{mm, b})
		}
	}
}

func (m *typedMachine) free() {
	for _, o := range m.bufs {
		o.m.Free(o.b)
	}
	m.bufs = nil
}

func (m *typedMachine) alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	b, err := m.s.first.p.alloc(nil, dt, n)
	if err != nil {
		return nil, err
	}
	m.keep(m.s.first.p.m, b)
	return b, nil
}

func (m *typedMachine) upload(ids []graph.NodeID) (tNodes, error) {
	b, err := m.alloc(backend.Int32, int64(len(ids)))
	if err != nil {
		return tNodes{}, err
	}
	if len(ids) > 0 {
		if err := m.s.first.p.m.Upload(b, ids); err != nil {
			return tNodes{}, err
		}
	}
	return tNodes{b: b, n: int64(len(ids))}, nil
}

func (m *typedMachine) Len(nodes tNodes) int { return int(nodes.n) }

// Draw is relation r's exchange at hop (the batched hop of typedhop.go
// with one relation, the relation's stream key as the hop key): a
// collective.
func (m *typedMachine) Draw(r, hop int, dst tNodes, key uint64) (*tRel, error) {
	out, err := m.drawRels(hop, []int{r}, []tNodes{dst}, []uint64{key})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// DrawHop draws every relation of rels at hop in one exchange per phase
// (typedhop.go): the hop costs the exchanges of one relation.
func (m *typedMachine) DrawHop(hop int, rels []int, dst []tNodes, keys []uint64) ([]*tRel, error) {
	fr := make([]tNodes, len(rels))
	for i, r := range rels {
		if r < 0 || r >= len(m.s.rels) {
			return nil, m.s.first.p.errf(hop, ErrProtocol, "relation %d of %d", r, len(m.s.rels))
		}
		fr[i] = dst[m.s.rels[r].Dst]
	}
	return m.drawRels(hop, rels, fr, keys)
}

// None is relation r's empty edge set for nd destinations (fanout 0 at
// this hop, on every rank).
func (m *typedMachine) None(r, nd int) (*tRel, error) {
	g := &tRel{nd: int64(nd)}
	if m.status != stOK {
		return g, nil
	}
	ptr, err := m.alloc(backend.Int64, int64(nd)+1)
	if err == nil {
		err = m.s.first.p.m.Upload(ptr, make([]int64, nd+1))
	}
	if err != nil {
		m.status, m.carried = stFailed, m.s.first.p.wrapErr(-1, "an empty relation", err)
		return g, nil
	}
	g.ptr = ptr
	return g, nil
}

// Relabel deduplicates node type t's frontier followed by the sources of
// its relations (in relation order) with the machine's Relabel over
// their concatenation. A failure is carried to the next header.
func (m *typedMachine) Relabel(t, hop int, dst tNodes, edges []*tRel) (tNodes, error) {
	if m.status != stOK {
		return dst, nil
	}
	out, err := m.relabel(dst, edges)
	if err != nil {
		m.status, m.carried = stFailed, m.s.first.p.wrapErr(hop, fmt.Sprintf("relabeling node type %d", t), err)
		return dst, nil
	}
	return out, nil
}

func (m *typedMachine) relabel(dst tNodes, edges []*tRel) (tNodes, error) {
	p, be := m.s.first.p, m.s.be
	fm := p.m
	var total int64
	var with []*tRel // the relations that drew edges
	for _, g := range edges {
		if g.e > 0 {
			total += g.e
			with = append(with, g)
		}
	}
	if total == 0 {
		return dst, nil // the sources are the frontier
	}
	if dst.n+total > maxEntries {
		return tNodes{}, fmt.Errorf("%w: %d frontier nodes and %d edges", ErrTooLarge, dst.n, total)
	}
	cat := with[0].src
	if len(with) > 1 {
		var err error
		if cat, err = m.alloc(backend.Int32, total); err != nil {
			return tNodes{}, err
		}
		var at int64
		for _, g := range with {
			if err := be.Copy(fm.View(cat, at, g.e), fm.View(g.src, 0, g.e)); err != nil {
				return tNodes{}, err
			}
			at += g.e
		}
	}
	// Relabel reads the edge count at ptr[nd] (the CPU machine the whole
	// offsets: one row ending there is enough).
	ptr, err := m.alloc(backend.Int64, dst.n+1)
	if err != nil {
		return tNodes{}, err
	}
	ip := make([]int64, dst.n+1)
	ip[dst.n] = total
	if err := fm.Upload(ptr, ip); err != nil {
		return tNodes{}, err
	}
	F := dst.b
	srcNodes, local, sizes, err := fm.Relabel(F, dst.n, cat, ptr, total)
	if err != nil {
		return tNodes{}, err
	}
	m.keep(fm, srcNodes, local, sizes)
	sz, err := p.read([]backend.Buffer{sizes}, []int64{3})
	if err != nil {
		return tNodes{}, err
	}
	if sz[0] != dst.n || sz[1] != total || sz[2] < dst.n || sz[2] > dst.n+total {
		return tNodes{}, fmt.Errorf("%w: device sizes %v for %d destinations and %d edges", ErrProtocol, sz[:3], dst.n, total)
	}
	var at int64
	for _, g := range with {
		g.local = fm.View(local, at, g.e)
		at += g.e
	}
	return tNodes{b: srcNodes, n: sz[2]}, nil
}

// download copies the hops (seeds' hop first) into a batch on the host.
func (m *typedMachine) download(seeds [][]graph.NodeID, hops []sample.TypedHop[tNodes, *tRel]) (*sample.HeteroMiniBatch, error) {
	fm, be := m.s.first.p.m, m.s.be
	// The back end's Download waits for the work queued before it (a
	// GPU's machines queue on the device's stream).
	get := func(dst any, b backend.Buffer, n int64) error {
		if n == 0 {
			return nil
		}
		return be.Download(dst, fm.View(b, 0, n))
	}
	L := len(hops)
	mb := &sample.HeteroMiniBatch{Seeds: make([][]graph.NodeID, len(seeds)), Blocks: make([]sample.HeteroBlock, L)}
	for t, ids := range seeds {
		mb.Seeds[t] = slices.Clone(ids)
	}
	for hop, h := range hops {
		blk := sample.HeteroBlock{SrcNodes: make([][]graph.NodeID, len(h.Src)), NumDst: slices.Clone(h.NumDst), Rels: make([]sample.RelBlock, len(h.Rels))}
		for t, src := range h.Src {
			blk.SrcNodes[t] = make([]graph.NodeID, src.n)
			if err := get(blk.SrcNodes[t], src.b, src.n); err != nil {
				return nil, err
			}
		}
		for r, g := range h.Rels {
			rb := sample.RelBlock{Indptr: make([]int64, g.nd+1), Indices: make([]int32, g.e), EdgeIDs: make([]int64, g.e)}
			if err := get(rb.Indptr, g.ptr, g.nd+1); err != nil {
				return nil, err
			}
			if g.e > 0 {
				if err := get(rb.Indices, g.local, g.e); err != nil {
					return nil, err
				}
				if err := get(rb.EdgeIDs, g.eid, g.e); err != nil {
					return nil, err
				}
			}
			blk.Rels[r] = rb
		}
		mb.Blocks[L-1-hop] = blk
	}
	return mb, nil
}
