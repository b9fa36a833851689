package serve

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// Typed batches (PyG's NeighborLoader over a HeteroData): the seeds are
// nodes of one input type; hop k samples, for every relation, the
// in-neighbors of the nodes of its destination type that hop k-1 added
// (the seeds at hop 0) with sample.HeteroSampler's per-relation fanouts
// (HeteroSampler.SampleHop, so each node's draws are those of
// HeteroSampler.Sample for the same key); each node type keeps its own
// n_id (type-local IDs, first-seen order) and each relation its own
// edge_index into its source and destination types' n_id.

// HeteroPyGBatch is a typed batch in PyG's HeteroData layout: per node
// type t, NodeIDs[t] (type-local IDs; the seeds first for the input
// type) and NumSampledNodes[t] (hops+1 entries: the seeds of the type,
// then the nodes new at each hop); per relation r, the edges Src[r] (local
// indices into NodeIDs[Src type]) -> Dst[r] (into NodeIDs[Dst type]), hop
// after hop, and NumSampledEdges[r] per hop.
type HeteroPyGBatch struct {
	InputType       int
	BatchSize       int
	NodeIDs         [][]graph.NodeID
	NumSampledNodes [][]int64
	Src, Dst        [][]int32
	NumSampledEdges [][]int64
}

// newHeteroRelabelers returns one Relabeler per node type.
func newHeteroRelabelers(numNodes []int64) []*Relabeler {
	out := make([]*Relabeler, len(numNodes))
	for t, n := range numNodes {
		out[t] = NewRelabeler(n)
	}
	return out
}

// SampleHeteroFrontier draws the typed batch of seeds (distinct nodes of
// type inputType) for key with h; rls holds one Relabeler per node type
// (reused across batches).
func SampleHeteroFrontier(h *sample.HeteroSampler, rls []*Relabeler, inputType int, seeds []graph.NodeID, key sample.Key) (*HeteroPyGBatch, error) {
	T, rels, hops := h.NumTypes(), h.Relations(), h.NumHops()
	if len(rls) != T || inputType < 0 || inputType >= T {
		return nil, fmt.Errorf("serve: %d relabelers and input type %d for %d node types", len(rls), inputType, T)
	}
	b := &HeteroPyGBatch{InputType: inputType, BatchSize: len(seeds), NodeIDs: make([][]graph.NodeID, T),
		NumSampledNodes: make([][]int64, T), Src: make([][]int32, len(rels)), Dst: make([][]int32, len(rels)),
		NumSampledEdges: make([][]int64, len(rels))}
	views := make([]PyGBatch, T) // each type's node list, grown by its Relabeler
	for t := range T {
		rls[t].reset()
		b.NumSampledNodes[t] = make([]int64, 1, hops+1)
	}
	for i, v := range seeds {
		if v < 0 || int64(v) >= int64(len(rls[inputType].pos)) {
			return nil, reqErr(ErrInvalid, "seeds", i, "node %d not in [0, %d)", v, len(rls[inputType].pos))
		}
		if p := rls[inputType].pos[v]; p >= 0 {
			return nil, reqErr(ErrInvalid, "seeds", i, "node %d repeats seed %d", v, p)
		}
		rls[inputType].add(&views[inputType], v)
	}
	b.NumSampledNodes[inputType][0] = int64(len(seeds))
	lo := make([]int, T)
	dst := make([][]graph.NodeID, T)
	for hop := range hops {
		hi := make([]int, T)
		for t := range T {
			hi[t] = len(views[t].NodeIDs)
			dst[t] = views[t].NodeIDs[lo[t]:hi[t]]
		}
		blk, err := h.SampleHop(dst, hop, key)
		if err != nil {
			return nil, err
		}
		for r, rel := range rels {
			rb := &blk.Rels[r]
			before := len(b.Src[r])
			if len(rb.Indptr) != len(dst[rel.Dst])+1 {
				return nil, fmt.Errorf("serve: hop %d relation %d: %d rows for %d destinations", hop, r, len(rb.Indptr)-1, len(dst[rel.Dst]))
			}
			srcs := blk.SrcNodes[rel.Src]
			for i := range dst[rel.Dst] {
				for _, j := range rb.Indices[rb.Indptr[i]:rb.Indptr[i+1]] {
					if j < 0 || int(j) >= len(srcs) {
						return nil, fmt.Errorf("serve: hop %d relation %d: source index %d not in [0, %d)", hop, r, j, len(srcs))
					}
					b.Src[r] = append(b.Src[r], rls[rel.Src].add(&views[rel.Src], srcs[j]))
					b.Dst[r] = append(b.Dst[r], int32(lo[rel.Dst]+i))
				}
			}
			b.NumSampledEdges[r] = append(b.NumSampledEdges[r], int64(len(b.Src[r])-before))
			if len(b.Src[r]) > math.MaxInt32 {
				return nil, reqErr(ErrTooLarge, "fanouts", -1, "relation %d: more than 2^31-1 edges in a batch", r)
			}
		}
		for t := range T {
			if len(views[t].NodeIDs) > math.MaxInt32 {
				return nil, reqErr(ErrTooLarge, "fanouts", -1, "node type %d: more than 2^31-1 nodes in a batch", t)
			}
			b.NumSampledNodes[t] = append(b.NumSampledNodes[t], int64(len(views[t].NodeIDs)-hi[t]))
		}
		lo = hi
	}
	for t := range T {
		b.NodeIDs[t] = views[t].NodeIDs
	}
	return b, nil
}

// heteroServed is what a server keeps of a typed dataset.
type heteroServed struct {
	h    *dataset.Hetero
	n    []int64
	rels []sample.Relation
}

func newHeteroServed(h *dataset.Hetero) (*heteroServed, error) {
	if err := dataset.ValidateHetero(h); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	hs := &heteroServed{h: h}
	for _, nt := range h.NodeTypes {
		hs.n = append(hs.n, nt.NumNodes)
	}
	for _, et := range h.EdgeTypes {
		hs.rels = append(hs.rels, sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In})
	}
	return hs, nil
}

// info describes the types for InfoReply.
func (hs *heteroServed) info() ([]*servepb.NodeTypeInfo, []*servepb.EdgeTypeInfo) {
	h := hs.h
	var nts []*servepb.NodeTypeInfo
	for t, nt := range h.NodeTypes {
		nts = append(nts, &servepb.NodeTypeInfo{Name: nt.Name, NumNodes: nt.NumNodes, FeatDim: int64(nt.FeatDim),
			Labeled: h.NumClasses > 0 && h.Labels != nil && t == h.Target})
	}
	var ets []*servepb.EdgeTypeInfo
	for _, et := range h.EdgeTypes {
		ets = append(ets, &servepb.EdgeTypeInfo{Src: uint32(et.Src), Rel: et.Rel, Dst: uint32(et.Dst), NumEdges: et.In.NumEdges()})
	}
	return nts, ets
}

// typedRequest checks the typed fields of req and returns the input type
// and one fanout list per relation.
func (hs *heteroServed) typedRequest(req *servepb.SampleRequest) (int, [][]int, error) {
	h := hs.h
	t := h.NodeType(req.InputType)
	if t < 0 {
		names := make([]string, len(h.NodeTypes))
		for i, nt := range h.NodeTypes {
			names[i] = nt.Name
		}
		return 0, nil, reqErr(ErrInvalid, "input_type", -1, "%q is no node type of %q (%v)", req.InputType, h.Name, names)
	}
	R := len(h.EdgeTypes)
	fan := make([][]int, R)
	check := func(r int, fs []int32) error {
		if len(fs) == 0 || len(fs) > MaxHops {
			return reqErr(ErrInvalid, "relation_fanouts", r, "%d hops: want 1..%d", len(fs), MaxHops)
		}
		out := make([]int, len(fs))
		for i, f := range fs {
			if f < -1 || f > MaxFanout {
				return reqErr(ErrInvalid, "relation_fanouts", r, "hop %d: %d: want -1 (all), 0 (none) or 1..%d", i, f, MaxFanout)
			}
			out[i] = int(f)
		}
		fan[r] = out
		return nil
	}
	if len(req.RelationFanouts) == 0 {
		if len(req.Fanouts) == 0 {
			return 0, nil, reqErr(ErrInvalid, "fanouts", -1, "no fanouts (give fanouts or relation_fanouts)")
		}
		for r := range R {
			if err := check(r, req.Fanouts); err != nil {
				return 0, nil, err
			}
		}
	} else {
		if len(req.Fanouts) > 0 {
			return 0, nil, reqErr(ErrInvalid, "fanouts", -1, "given with relation_fanouts: give one of them")
		}
		if len(req.RelationFanouts) != R {
			return 0, nil, reqErr(ErrInvalid, "relation_fanouts", -1, "%d entries for %d relations (each relation once)", len(req.RelationFanouts), R)
		}
		for k, rf := range req.RelationFanouts {
			r := int(rf.GetRelation())
			if r >= R || fan[r] != nil {
				return 0, nil, reqErr(ErrInvalid, "relation_fanouts", k, "relation %d: out of [0, %d) or repeated", r, R)
			}
			if err := check(r, rf.GetFanouts()); err != nil {
				return 0, nil, err
			}
		}
	}
	for r := range R {
		if len(fan[r]) != len(fan[0]) {
			return 0, nil, reqErr(ErrInvalid, "relation_fanouts", r, "%d hops, relation 0 has %d (one per hop for every relation)", len(fan[r]), len(fan[0]))
		}
	}
	if req.WithLabels && (h.Labels == nil || h.NumClasses == 0) {
		return 0, nil, reqErr(ErrUnavailable, "with_labels", -1, "the dataset %q has no labels", h.Name)
	}
	return t, fan, nil
}

// seedsOf returns the seeds of a typed request: explicit type-local IDs,
// or a split of the target type.
func (hs *heteroServed) seedsOf(req *servepb.SampleRequest, t int) ([]graph.NodeID, error) {
	h := hs.h
	n := hs.n[t]
	if req.Seeds != nil {
		if req.Split != servepb.Split_SPLIT_UNSPECIFIED {
			return nil, reqErr(ErrInvalid, "split", -1, "%s given with seeds: give one of them", req.Split)
		}
		ids, err := DecodeIDs(req.Seeds, "seeds", n, int(min(n, math.MaxInt32)))
		if err != nil {
			return nil, err
		}
		seen := make([]uint64, (n+63)/64)
		for i, v := range ids {
			if seen[v/64]&(1<<(v%64)) != 0 {
				return nil, reqErr(ErrInvalid, "seeds", i, "node %d appears twice (seeds must be distinct)", v)
			}
			seen[v/64] |= 1 << (v % 64)
		}
		return ids, nil
	}
	if req.Split == servepb.Split_SPLIT_ALL {
		all := make([]graph.NodeID, n)
		for i := range all {
			all[i] = graph.NodeID(i)
		}
		return all, nil
	}
	if req.Split == servepb.Split_SPLIT_UNSPECIFIED {
		return nil, reqErr(ErrInvalid, "seeds", -1, "neither seeds nor a split given")
	}
	if t != h.Target || h.NumClasses == 0 {
		return nil, reqErr(ErrUnavailable, "split", -1, "the splits of %q are on its labeled node type, not %q", h.Name, h.NodeTypes[t].Name)
	}
	var ids []int32
	switch req.Split {
	case servepb.Split_SPLIT_TRAIN:
		ids = h.Train
	case servepb.Split_SPLIT_VAL:
		ids = h.Val
	case servepb.Split_SPLIT_TEST:
		ids = h.Test
	default:
		return nil, reqErr(ErrInvalid, "split", -1, "unknown split %d", int32(req.Split))
	}
	if ids == nil {
		return nil, reqErr(ErrUnavailable, "split", -1, "the dataset %q has no %s split", h.Name, req.Split)
	}
	return ids, nil
}

// typedMessage encodes typed batch i of the stream as a Batch.
func (st *stream) typedMessage(b *HeteroPyGBatch, i int, pos []int32) *servepb.Batch {
	h := st.s.het.h
	m := &servepb.Batch{Index: uint32(i), NumBatches: uint32(st.nb), BatchSize: uint32(b.BatchSize)}
	in := make([]int64, len(pos))
	for k, p := range pos {
		in[k] = int64(p)
	}
	m.InputId = Int64Tensor(in)
	for t, ids := range b.NodeIDs {
		nt := &h.NodeTypes[t]
		tn := &servepb.TypedNodes{Type: uint32(t), NId: Int32Tensor(ids, int64(len(ids))), NumSampledNodes: b.NumSampledNodes[t]}
		if st.withX && nt.FeatDim > 0 {
			tn.X = gatherRows(nt.Features, nt.FeatDim, ids)
		}
		if st.withY && t == h.Target && h.Labels != nil {
			tn.Y = gatherLabels(h.Labels, ids)
		}
		m.Nodes = append(m.Nodes, tn)
	}
	for r := range b.Src {
		m.Edges = append(m.Edges, &servepb.TypedEdges{Relation: uint32(r),
			EdgeIndex: Int32Tensor(slices.Concat(b.Src[r], b.Dst[r]), 2, int64(len(b.Src[r]))), NumSampledEdges: b.NumSampledEdges[r]})
	}
	return m
}
