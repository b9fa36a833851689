package gpusample

import (
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// HeteroSampler is typed neighbor sampling on one GPU: sample.SampleTyped
// (the algorithm sample.HeteroSampler runs on the CPU) on the CUDA
// machine below. Each relation's draws are a Sampler's (the hop API:
// CountHop, DrawHop under the relation's stream), each node type's
// deduplication is Stepper.Relabel over the type's frontier followed by
// the sources of its relations in relation order, so uniform batches
// equal the CPU sampler's, byte for byte.
//
// Sizes are read back per step (each relation's edge count before its
// draws, each type's source count after its relabel), so a hop costs
// one synchronization per relation and per node type; the batch is
// downloaded into a sample.HeteroMiniBatch. Safe for concurrent use
// (batches serialize).
type HeteroSampler struct {
	dev      device
	numNodes []int64
	rels     []sample.Relation
	fanouts  [][]int
	hops     int
	per      []*Sampler // per relation; nil where every fanout is 0
	steps    []*Stepper
	relabel  *Stepper // any relation's: the relabel kernels are shared

	mu   sync.Mutex
	host backend.HostBuffer // pinned, for the sizes read back
}

var _ sample.TypedSampler = (*HeteroSampler)(nil)

// NewHetero checks the typed graph and cfg exactly as
// sample.NewHeteroSampler does (cfg.Workers is not used) and places every
// relation sampled at some hop on b with placement place (OnDevice or
// Mapped).
func NewHetero(b backend.Backend, numNodes []int64, rels []sample.Relation, cfg sample.HeteroConfig, place Placement) (*HeteroSampler, error) {
	const op = "gpusample.NewHetero"
	dev, err := asDevice(op, b)
	if err != nil {
		return nil, err
	}
	if place == Split {
		return nil, &sample.Error{Op: op, Field: "Placement", Pos: -1, Detail: "typed sampling places relations OnDevice or Mapped", Err: sample.ErrConfig}
	}
	cfg.Workers = 1
	cpu, err := sample.NewHeteroSampler(numNodes, rels, cfg) // the checks
	if err != nil {
		return nil, err
	}
	s := &HeteroSampler{dev: dev, numNodes: slices.Clone(numNodes), rels: slices.Clone(rels), hops: cpu.NumHops(),
		per: make([]*Sampler, len(rels)), steps: make([]*Stepper, len(rels))}
	s.fanouts = make([][]int, len(rels))
	for r, rel := range rels {
		f := cpu.Fanouts(r)
		s.fanouts[r] = slices.Clone(f)
		if !slices.ContainsFunc(f, func(k int) bool { return k != 0 }) {
			continue
		}
		nf := slices.Clone(f) // hops of fanout 0 never draw
		for h := range nf {
			if nf[h] == 0 {
				nf[h] = 1
			}
		}
		if s.per[r], err = New(dev, sample.SquareView(rel.In), Config{Fanouts: nf, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: place}); err != nil {
			s.Close()
			if e, ok := err.(*sample.Error); ok {
				e.Detail = fmt.Sprintf("relation %d: %s", r, e.Detail)
			}
			return nil, err
		}
		if s.steps[r], err = s.per[r].Stepper(); err != nil {
			s.Close()
			return nil, err
		}
		if s.relabel == nil {
			s.relabel = s.steps[r]
		}
	}
	if s.host, err = dev.AllocPinned(64, false); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the relations' device copies.
func (s *HeteroSampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, p := range s.per {
		if p != nil {
			if err := p.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	if s.host != nil {
		if err := s.host.Free(); err != nil && first == nil {
			first = err
		}
	}
	s.per, s.steps, s.relabel, s.host = nil, nil, nil, nil
	return first
}

// NumHops is the number of hops (blocks) per batch.
func (s *HeteroSampler) NumHops() int { return s.hops }

// TopologyBytes sums the relations' Sampler.TopologyBytes.
func (s *HeteroSampler) TopologyBytes() (device, host int64) {
	for _, p := range s.per {
		if p != nil {
			d, h := p.TopologyBytes()
			device, host = device+d, host+h
		}
	}
	return device, host
}

// Sample draws the typed neighborhoods of seeds (distinct nodes of type
// seedType) for key, as sample.HeteroSampler.Sample.
func (s *HeteroSampler) Sample(seedType int, seeds []graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	const op = "gpusample.HeteroSampler.Sample"
	if seedType < 0 || seedType >= len(s.numNodes) {
		return nil, &sample.Error{Op: op, Field: "seedType", Pos: -1, Detail: fmt.Sprintf("%d not in [0, %d)", seedType, len(s.numNodes)), Err: sample.ErrConfig}
	}
	typed := make([][]graph.NodeID, len(s.numNodes))
	typed[seedType] = seeds
	return s.sample(op, typed, key)
}

// SampleTypes draws with seeds of several types (seeds[t]: distinct
// nodes of type t), as sample.HeteroSampler.SampleTypes.
func (s *HeteroSampler) SampleTypes(seeds [][]graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	const op = "gpusample.HeteroSampler.SampleTypes"
	if len(seeds) != len(s.numNodes) {
		return nil, &sample.Error{Op: op, Field: "seeds", Pos: -1, Detail: fmt.Sprintf("%d seed lists for %d node types", len(seeds), len(s.numNodes)), Err: sample.ErrConfig}
	}
	return s.sample(op, seeds, key)
}

func (s *HeteroSampler) sample(op string, seeds [][]graph.NodeID, key sample.Key) (*sample.HeteroMiniBatch, error) {
	mb := &sample.HeteroMiniBatch{Seeds: make([][]graph.NodeID, len(s.numNodes)), Blocks: make([]sample.HeteroBlock, s.hops)}
	for t, ids := range seeds {
		// Later frontiers come out of Relabel distinct; the seeds are
		// checked here, as the CPU machine's relabel checks them.
		if err := checkSeeds(op, ids, s.numNodes[t]); err != nil {
			return nil, err
		}
		mb.Seeds[t] = slices.Clone(ids)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host == nil {
		return nil, &sample.Error{Op: op, Field: "sampler", Pos: -1, Detail: "closed", Err: sample.ErrConfig}
	}
	m := &cudaTyped{s: s, op: op}
	defer m.free()
	dst := make([]gNodes, len(seeds))
	for t, ids := range seeds {
		var err error
		if dst[t], err = m.upload(ids); err != nil {
			return nil, err
		}
	}
	hops, err := sample.SampleTyped(m, s.rels, s.fanouts, dst, key)
	if err != nil {
		return nil, err
	}
	for hop, h := range hops {
		blk, err := m.download(h)
		if err != nil {
			return nil, err
		}
		mb.Blocks[s.hops-1-hop] = blk
	}
	return mb, nil
}

// gNodes is the CUDA machine's node list: n int32 IDs in b (which holds
// at least one element, so that empty lists are buffers too).
type gNodes struct {
	b backend.Buffer
	n int
}

// gRel is one relation's sampled edges of a hop: row offsets ptr (nd+1),
// edge ids eid and sources src (e each; src holds local positions after
// the relabel, in local).
type gRel struct {
	nd       int
	e        int64
	ptr      backend.Buffer
	eid, src backend.Buffer
	local    backend.Buffer
}

// cudaTyped is the CUDA machine of one batch: it owns every buffer it
// makes until free.
type cudaTyped struct {
	s    *HeteroSampler
	op   string
	bufs []backend.Buffer
}

var _ sample.TypedMachine[gNodes, *gRel] = (*cudaTyped)(nil)

func (m *cudaTyped) free() {
	for _, b := range m.bufs {
		m.s.dev.Free(b)
	}
	m.bufs = nil
}

func (m *cudaTyped) alloc(q backend.Queue, dt backend.DType, n int64) (backend.Buffer, error) {
	b, err := q.AllocRaw(dt, int(max(n, 1)))
	if err != nil {
		return nil, err
	}
	m.bufs = append(m.bufs, b)
	return b, nil
}

// readBack queues the copy of the first 8*n bytes of b to the pinned
// area and waits for it.
func (m *cudaTyped) readBack(q backend.Queue, b backend.Buffer, n int) ([]int64, error) {
	if err := q.CopyToHost(m.s.host, 0, b, uint64(8*n)); err != nil {
		return nil, err
	}
	if err := q.Sync(); err != nil {
		return nil, err
	}
	return slices.Clone(m.s.host.Int64s()[:n]), nil
}

func (m *cudaTyped) upload(ids []graph.NodeID) (gNodes, error) {
	g := gNodes{n: len(ids)}
	err := m.s.dev.Enqueue(func(q backend.Queue) error {
		var err error
		if g.b, err = m.alloc(q, backend.Int32, int64(len(ids))); err != nil || len(ids) == 0 {
			return err
		}
		return q.UploadFrom(g.b, ids)
	})
	return g, err
}

func (m *cudaTyped) Len(nodes gNodes) int { return nodes.n }

func (m *cudaTyped) Draw(r, hop int, dst gNodes, key uint64) (*gRel, error) {
	st := m.s.steps[r]
	g := &gRel{nd: dst.n}
	err := m.s.dev.Enqueue(func(q backend.Queue) error {
		n := int64(dst.n)
		ptr, err := st.CountHop(q, hop, dst.b, n)
		if err != nil {
			return err
		}
		m.bufs = append(m.bufs, ptr)
		g.ptr = ptr
		last, err := backend.View(ptr, dst.n, 1)
		if err != nil {
			return err
		}
		e, err := m.readBack(q, last, 1)
		if err != nil {
			return err
		}
		g.e = e[0]
		if g.eid, err = m.alloc(q, backend.Int64, g.e); err != nil {
			return err
		}
		if g.src, err = m.alloc(q, backend.Int32, g.e); err != nil {
			return err
		}
		return st.DrawHop(q, hop, dst.b, ptr, n, []int64{0, n}, []uint64{key}, g.eid, g.src, g.e)
	})
	return g, err
}

func (m *cudaTyped) None(r, nd int) (*gRel, error) {
	g := &gRel{nd: nd}
	err := m.s.dev.Enqueue(func(q backend.Queue) error {
		var err error
		if g.ptr, err = m.alloc(q, backend.Int64, int64(nd)+1); err != nil {
			return err
		}
		return q.Memset(g.ptr, 0)
	})
	return g, err
}

func (m *cudaTyped) Relabel(t, hop int, dst gNodes, edges []*gRel) (gNodes, error) {
	var total int64
	var with []*gRel // the relations that drew edges
	for _, g := range edges {
		if g.e > 0 {
			total += g.e
			with = append(with, g)
		}
	}
	if total == 0 {
		return dst, nil // the sources are the frontier
	}
	out := gNodes{}
	err := m.s.dev.Enqueue(func(q backend.Queue) error {
		// The relations' sources, concatenated in relation order.
		cat := with[0].src
		if len(with) > 1 {
			var err error
			if cat, err = m.alloc(q, backend.Int32, total); err != nil {
				return err
			}
			off := 0
			for _, g := range with {
				to, err := backend.View(cat, off, int(g.e))
				if err != nil {
					return err
				}
				from, err := backend.View(g.src, 0, int(g.e))
				if err != nil {
					return err
				}
				if err := q.Copy(to, from); err != nil {
					return err
				}
				off += int(g.e)
			}
		}
		// Relabel reads the edge count at ptr[nd].
		nd := int64(dst.n)
		ptr, err := m.alloc(q, backend.Int64, nd+1)
		if err != nil {
			return err
		}
		end, err := backend.View(ptr, dst.n, 1)
		if err != nil {
			return err
		}
		if err := q.UploadFrom(end, []int64{total}); err != nil {
			return err
		}
		srcNodes, local, sizes, err := m.s.relabel.Relabel(q, dst.b, nd, cat, ptr, total)
		if err != nil {
			return err
		}
		m.bufs = append(m.bufs, srcNodes, local, sizes)
		sz, err := m.readBack(q, sizes, 3)
		if err != nil {
			return err
		}
		if sz[0] != nd || sz[1] != total || sz[2] < nd || sz[2] > nd+total {
			return fmt.Errorf("%s: hop %d type %d: device sizes %v for %d destinations and %d edges", m.op, hop, t, sz, nd, total)
		}
		out = gNodes{b: srcNodes, n: int(sz[2])}
		off := 0
		for _, g := range with {
			if g.local, err = backend.View(local, off, int(g.e)); err != nil {
				return err
			}
			off += int(g.e)
		}
		return nil
	})
	return out, err
}

// download copies one hop into a sample.HeteroBlock.
func (m *cudaTyped) download(h sample.TypedHop[gNodes, *gRel]) (sample.HeteroBlock, error) {
	dev := m.s.dev
	get := func(dst any, b backend.Buffer, n int) error {
		if n == 0 {
			return nil
		}
		v, err := backend.View(b, 0, n)
		if err != nil {
			return err
		}
		return dev.Download(dst, v)
	}
	blk := sample.HeteroBlock{SrcNodes: make([][]graph.NodeID, len(h.Src)), NumDst: slices.Clone(h.NumDst), Rels: make([]sample.RelBlock, len(h.Rels))}
	for t, src := range h.Src {
		blk.SrcNodes[t] = make([]graph.NodeID, src.n)
		if err := get(blk.SrcNodes[t], src.b, src.n); err != nil {
			return blk, err
		}
	}
	for r, g := range h.Rels {
		rb := sample.RelBlock{Indptr: make([]int64, g.nd+1), Indices: make([]int32, g.e), EdgeIDs: make([]int64, g.e)}
		if err := get(rb.Indptr, g.ptr, g.nd+1); err != nil {
			return blk, err
		}
		if g.e > 0 {
			if g.local == nil {
				return blk, fmt.Errorf("%s: relation %d drew %d edges that no relabel placed", m.op, r, g.e)
			}
			if err := get(rb.Indices, g.local, int(g.e)); err != nil {
				return blk, err
			}
			if err := get(rb.EdgeIDs, g.eid, int(g.e)); err != nil {
				return blk, err
			}
		}
		blk.Rels[r] = rb
	}
	return blk, nil
}
