package serve

import (
	"encoding/binary"
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// Edge-seeded batches (PyG's LinkNeighborLoader): an epoch runs over the
// edges of edge_label_index as a node epoch runs over its seeds (Plan);
// batch i takes its positives there, draws its negatives with package
// link's training negatives (link.Negatives, keyed by the batch's key),
// and samples the neighborhoods of the distinct endpoints of both, in
// ascending order (link.NewBatch), with the stream's node sampler. The
// batch is then the node batch of those seeds plus edge_label_index:
// the positives' and negatives' endpoints as local indices into n_id.

// MaxNegAmount bounds LinkRequest.neg_amount (negatives per positive).
const MaxNegAmount = 1024

// negTrials is link's bound on the redraws of an excluded negative.
const negTrials = 20

// LinkConfig configures the negatives of link batches.
type LinkConfig struct {
	Amount  float64 // negatives per positive, ceil(Amount * P) per batch; 0: none
	Exclude bool    // redraw negatives that are known edges (the graph's, the positives') or self-pairs
	Seed    uint64  // the request's seed
}

// NewLinkNegatives returns the negative sampler of link batches over the
// graph whose out-adjacency is out, with positives pos (nil when
// cfg.Amount is 0). With cfg.Exclude the known edges are out's and pos's.
func NewLinkNegatives(out *graph.CSR, pos link.Edges, cfg LinkConfig) (*link.Negatives, error) {
	if cfg.Amount == 0 {
		return nil, nil
	}
	if !(cfg.Amount > 0 && cfg.Amount <= MaxNegAmount) {
		return nil, reqErr(ErrInvalid, "link.neg_amount", -1, "%v: want 0 (no negatives) or in (0, %d]", cfg.Amount, MaxNegAmount)
	}
	known := out
	if cfg.Exclude {
		// The known pairs: every edge of the graph and every positive,
		// rows sorted (the excluding sampler searches them).
		n := out.NumRows
		src := make([]graph.NodeID, 0, out.NumEdges()+int64(pos.Len()))
		dst := make([]graph.NodeID, 0, cap(src))
		for u := int64(0); u < n; u++ {
			for _, v := range out.Indices[out.Indptr[u]:out.Indptr[u+1]] {
				src, dst = append(src, graph.NodeID(u)), append(dst, v)
			}
		}
		src, dst = append(src, pos.Src...), append(dst, pos.Dst...)
		var err error
		if known, err = graph.FromEdges(n, src, dst, graph.WithDedup(graph.ReduceSum)); err != nil {
			return nil, err
		}
		known.Weights = nil
	}
	cfgL := link.Config{NegRatio: int(math.Ceil(cfg.Amount)), NegSample: link.NegUniform, NegExclude: cfg.Exclude}
	cfgL.Seed = cfg.Seed
	return link.NewNegatives(&link.Split{NumNodes: out.NumRows, Out: known}, &cfgL)
}

// NumNegatives is the negatives of a batch of p positives: ceil(amount*p),
// PyG's count.
func NumNegatives(amount float64, p int) int {
	return int(math.Ceil(amount * float64(p)))
}

// LinkBatch builds the link batch of positives pos for key: its
// NumNegatives negatives drawn by neg (nil: none), and the node batch
// that sampleSeeds makes of the distinct endpoints of all of them,
// ascending, with LabelSrc and LabelDst set.
func LinkBatch(neg *link.Negatives, amount float64, pos link.Edges, key sample.Key,
	sampleSeeds func([]graph.NodeID) (*PyGBatch, error)) (*PyGBatch, error) {
	var ne link.Edges
	if neg != nil && pos.Len() > 0 {
		var err error
		if ne, err = neg.Draw(pos, key.Epoch, key.Batch); err != nil {
			return nil, err
		}
		k := min(NumNegatives(amount, pos.Len()), ne.Len())
		ne.Src, ne.Dst = ne.Src[:k], ne.Dst[:k]
	}
	lb := link.NewBatch(pos, ne)
	b, err := sampleSeeds(lb.Seeds)
	if err != nil {
		return nil, err
	}
	b.LabelSrc, b.LabelDst = lb.SrcRow, lb.DstRow
	return b, nil
}

// linkStream is a link request's edges and negatives.
type linkStream struct {
	src, dst []graph.NodeID
	neg      *link.Negatives
	amount   float64
}

// prepareLink validates req.link and returns the epoch's edges.
func (s *Server) prepareLink(req *servepb.SampleRequest) (*linkStream, error) {
	lr := req.Link
	if req.Seeds != nil || req.Split != servepb.Split_SPLIT_UNSPECIFIED {
		return nil, reqErr(ErrInvalid, "link", -1, "link batches are seeded by link.edge_label_index: leave seeds and split unset")
	}
	if req.Owned {
		return nil, reqErr(ErrInvalid, "owned", -1, "link batches cannot be routed by partition: route round-robin")
	}
	if req.InputType != "" {
		return nil, reqErr(ErrInvalid, "input_type", -1, "link batches on typed graphs are not served (sample the graph with its types erased)")
	}
	if math.IsNaN(lr.NegAmount) || lr.NegAmount < 0 || lr.NegAmount > MaxNegAmount {
		return nil, reqErr(ErrInvalid, "link.neg_amount", -1, "%v: want 0 (no negatives) or in (0, %d]", lr.NegAmount, MaxNegAmount)
	}
	// A batch's pairs, negatives included, are bounded as a node batch's
	// seeds are (the negatives' arrays are sized from them).
	if per := 1 + math.Ceil(lr.NegAmount); float64(req.BatchSize)*per > MaxBatchSize {
		return nil, reqErr(ErrTooLarge, "batch_size", -1, "%d edges with %v negatives each: more than %d pairs in a batch", req.BatchSize, lr.NegAmount, MaxBatchSize)
	}
	ls := &linkStream{amount: lr.NegAmount}
	out := s.ds.Graph
	if lr.EdgeLabelIndex != nil {
		var err error
		if ls.src, ls.dst, err = DecodeEdgeIndex(lr.EdgeLabelIndex, "link.edge_label_index", s.n, math.MaxInt32); err != nil {
			return nil, err
		}
	} else {
		if out.NumEdges() > math.MaxInt32 {
			return nil, reqErr(ErrTooLarge, "link.edge_label_index", -1, "the graph's %d edges exceed 2^31-1: give edge_label_index", out.NumEdges())
		}
		ls.src = make([]graph.NodeID, out.NumEdges())
		for u := int64(0); u < out.NumRows; u++ {
			for e := out.Indptr[u]; e < out.Indptr[u+1]; e++ {
				ls.src[e] = graph.NodeID(u)
			}
		}
		ls.dst = out.Indices
	}
	var err error
	ls.neg, err = NewLinkNegatives(out, link.Edges{Src: ls.src, Dst: ls.dst}, LinkConfig{Amount: lr.NegAmount, Exclude: lr.NegExclude, Seed: req.Seed})
	if err != nil {
		if _, ok := err.(*RequestError); ok {
			return nil, err
		}
		return nil, reqErr(ErrInvalid, "link", -1, "%v", err)
	}
	return ls, nil
}

// DecodeEdgeIndex reads an int32 or int64 [2, M] tensor of node pairs
// (row 0 the sources), each ID checked in [0, numNodes), M at most
// maxLen.
func DecodeEdgeIndex(t *servepb.Tensor, field string, numNodes int64, maxLen int) (src, dst []graph.NodeID, err error) {
	n, err := CheckTensor(t, field)
	if err != nil {
		return nil, nil, err
	}
	if len(t.Shape) != 2 || t.Shape[0] != 2 {
		return nil, nil, reqErr(ErrInvalid, field, -1, "shape %v, want [2, M]", t.Shape)
	}
	if t.Dtype != servepb.DType_DTYPE_INT32 && t.Dtype != servepb.DType_DTYPE_INT64 {
		return nil, nil, reqErr(ErrInvalid, field, -1, "dtype %s, want int32 or int64", t.Dtype)
	}
	m := n / 2
	if m > int64(maxLen) {
		return nil, nil, reqErr(ErrTooLarge, field, -1, "%d pairs, at most %d", m, maxLen)
	}
	ids := make([]graph.NodeID, n)
	for i := range ids {
		var v int64
		if t.Dtype == servepb.DType_DTYPE_INT32 {
			v = int64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
		} else {
			v = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		if v < 0 || v >= numNodes {
			return nil, nil, reqErr(ErrInvalid, field, i, "node %d (row %d, column %d) not in [0, %d)", v, int64(i)/m, int64(i)%m, numNodes)
		}
		ids[i] = graph.NodeID(v)
	}
	return ids[:m], ids[m:], nil
}
