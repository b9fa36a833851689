package serve

import (
	"context"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// linkEdges returns every stride-th stored edge of ds, and a few pairs
// that are no edge of it.
func linkEdges(ds *dataset.Dataset, stride int) (src, dst []int32) {
	g := ds.Graph
	k := 0
	for u := int64(0); u < g.NumRows; u++ {
		for _, v := range g.Indices[g.Indptr[u]:g.Indptr[u+1]] {
			if k%stride == 0 {
				src, dst = append(src, int32(u)), append(dst, v)
			}
			k++
		}
	}
	for i := int32(0); i < 10; i++ {
		if !hasEdgeOut(g, i, 1999-i) {
			src, dst = append(src, i), append(dst, 1999-i)
		}
	}
	return src, dst
}

func hasEdgeOut(g *graph.CSR, u, v int32) bool {
	return slices.Contains(g.Indices[g.Indptr[u]:g.Indptr[u+1]], v)
}

// expectLink computes link batch i of req without the server: the
// positives Plan gives, link.Negatives' draws for the batch's key, the
// endpoints ordered by link.NewBatch, sampled by a NeighborSampler as a
// MiniBatch and converted with FromMiniBatch.
func expectLink(t *testing.T, ds *dataset.Dataset, req *servepb.SampleRequest, src, dst []int32, i int) (*PyGBatch, []int64) {
	t.Helper()
	f := make([]int, len(req.Fanouts))
	for k, v := range req.Fanouts {
		f[k] = int(v)
	}
	ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: f})
	if err != nil {
		t.Fatal(err)
	}
	e := Epoch{BatchSize: int(req.BatchSize), Shuffle: req.Shuffle, Seed: req.Seed, Epoch: int(req.Epoch), Rank: int(req.Rank), World: max(1, int(req.WorldSize))}
	order, err := Plan(len(src), e)
	if err != nil {
		t.Fatal(err)
	}
	pos := order[i*e.BatchSize : min((i+1)*e.BatchSize, len(order))]
	pe := link.Edges{}
	in := make([]int64, len(pos))
	for k, p := range pos {
		pe.Src, pe.Dst = append(pe.Src, src[p]), append(pe.Dst, dst[p])
		in[k] = int64(p)
	}
	amount := req.Link.NegAmount
	neg, err := NewLinkNegatives(ds.Graph, link.Edges{Src: src, Dst: dst}, LinkConfig{Amount: amount, Exclude: req.Link.NegExclude, Seed: req.Seed})
	if err != nil {
		t.Fatal(err)
	}
	key := e.Key(i)
	var ne link.Edges
	if neg != nil {
		if ne, err = neg.Draw(pe, key.Epoch, key.Batch); err != nil {
			t.Fatal(err)
		}
		k := int(math.Ceil(amount * float64(len(pos))))
		ne.Src, ne.Dst = ne.Src[:k], ne.Dst[:k]
	}
	lb := link.NewBatch(pe, ne)
	mb, err := ns.Sample(lb.Seeds, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromMiniBatch(mb, NewRelabeler(ds.NumNodes()), ds.NumNodes())
	if err != nil {
		t.Fatal(err)
	}
	b.LabelSrc, b.LabelDst = lb.SrcRow, lb.DstRow
	return b, in
}

func checkLinkBatch(t *testing.T, ds *dataset.Dataset, got *servepb.Batch, want *PyGBatch, in []int64, src, dst []int32, exclude bool) {
	t.Helper()
	checkBatch(t, ds, got, want, in)
	eli := int32s(t, got.EdgeLabelIndex)
	m := len(want.LabelSrc)
	if !slices.Equal(got.EdgeLabelIndex.Shape, []int64{2, int64(m)}) || !slices.Equal(eli[:m], want.LabelSrc) || !slices.Equal(eli[m:], want.LabelDst) {
		t.Fatalf("batch %d: edge_label_index differs", got.Index)
	}
	// The relabelled positives map back to their global IDs through n_id.
	nid := int32s(t, got.NId)
	for k, p := range in {
		if nid[eli[k]] != src[p] || nid[eli[m+k]] != dst[p] {
			t.Fatalf("batch %d: positive %d is (%d, %d), edge %d is (%d, %d)", got.Index, k, nid[eli[k]], nid[eli[m+k]], p, src[p], dst[p])
		}
	}
	// The seeds are the distinct endpoints, ascending.
	ends := slices.Concat(eli[:m], eli[m:])
	slices.Sort(ends)
	if ends = slices.Compact(ends); len(ends) != int(got.BatchSize) || ends[len(ends)-1] != int32(got.BatchSize)-1 ||
		!slices.IsSorted(nid[:got.BatchSize]) {
		t.Fatalf("batch %d: %d seeds, endpoints %v", got.Index, got.BatchSize, ends)
	}
	if exclude {
		pos := map[[2]int32]bool{}
		for k := range src {
			pos[[2]int32{src[k], dst[k]}] = true
		}
		for k := len(in); k < m; k++ {
			u, v := nid[eli[k]], nid[eli[m+k]]
			if u == v || pos[[2]int32{u, v}] || hasEdgeOut(ds.Graph, u, v) {
				t.Fatalf("batch %d: negative (%d, %d) is a positive, an edge or a self-pair", got.Index, u, v)
			}
		}
	}
}

func TestLinkMatchesSamplers(t *testing.T) {
	ds := tiny(t)
	dir := ringDir(t)
	_, addr := start(t, Options{RingDir: dir})
	c := dial(t, addr, ClientOptions{})
	src, dst := linkEdges(ds, 7)
	for _, tc := range []struct {
		name    string
		amount  float64
		exclude bool
		world   uint32
	}{{"ratio 1", 1, false, 1}, {"ratio 2.5 excluded", 2.5, true, 1}, {"no negatives, rank 1 of 2", 0, false, 2}} {
		req := &servepb.SampleRequest{BatchSize: 50, Fanouts: []int32{4, 2}, Shuffle: true, Seed: 9, Epoch: 2,
			Rank: tc.world - 1, WorldSize: tc.world, WithFeatures: true, Workers: 2,
			Link: &servepb.LinkRequest{EdgeLabelIndex: Int32Tensor(slices.Concat(src, dst), 2, int64(len(src))), NegAmount: tc.amount, NegExclude: tc.exclude}}
		got := collect(t, c, proto.Clone(req).(*servepb.SampleRequest))
		if want := NumBatches(len(src), 50, int(tc.world), false); len(got) != want || want < 5 {
			t.Fatalf("%s: %d batches, want %d", tc.name, len(got), want)
		}
		negs := 0
		for i, b := range got {
			w, in := expectLink(t, ds, req, src, dst, i)
			checkLinkBatch(t, ds, b, w, in, src, dst, tc.exclude)
			if n := int(b.EdgeLabelIndex.Shape[1]) - len(in); n != int(math.Ceil(tc.amount*float64(len(in)))) {
				t.Fatalf("%s: batch %d: %d negatives for %d positives", tc.name, i, n, len(in))
			}
			negs += int(b.EdgeLabelIndex.Shape[1]) - len(in)
		}
		if tc.amount > 0 && negs == 0 {
			t.Fatalf("%s: no negatives", tc.name)
		}
		// The ring carries the same batches (edge_label_index in it).
		sc := openShm(t, c, proto.Clone(req).(*servepb.SampleRequest), &servepb.ShmRequest{Slots: 2})
		for i := 0; ; i++ {
			b, err := sc.next()
			if err == io.EOF {
				if i != len(got) {
					t.Fatalf("%s: %d batches through the ring, %d through Sample", tc.name, i, len(got))
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Shm == nil || !proto.Equal(b.EdgeLabelIndex, got[i].EdgeLabelIndex) || !proto.Equal(b.NId, got[i].NId) {
				t.Fatalf("%s: ring batch %d differs from Sample's", tc.name, i)
			}
			if err := sc.release(uint64(i + 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Unset edge_label_index: every stored edge, row by row.
	req := &servepb.SampleRequest{BatchSize: 4096, Fanouts: []int32{2}, Link: &servepb.LinkRequest{NegAmount: 1}}
	got := collect(t, c, req)
	if want := NumBatches(int(ds.Graph.NumEdges()), 4096, 1, false); len(got) != want {
		t.Fatalf("all edges: %d batches, want %d", len(got), want)
	}
	nid, eli := int32s(t, got[1].NId), int32s(t, got[1].EdgeLabelIndex)
	m := int(got[1].EdgeLabelIndex.Shape[1])
	for k, p := range int64s(t, got[1].InputId) {
		u, v := nid[eli[k]], nid[eli[m+k]]
		if p != 4096+int64(k) || !hasEdgeOut(ds.Graph, u, v) || ds.Graph.Indices[p] != v {
			t.Fatalf("all edges: positive %d (input_id %d) is (%d, %d)", k, p, u, v)
		}
	}
}

func TestLinkRefusals(t *testing.T) {
	_, addr := start(t, Options{})
	c := dial(t, addr, ClientOptions{})
	ok := func() *servepb.SampleRequest {
		return &servepb.SampleRequest{BatchSize: 8, Fanouts: []int32{2},
			Link: &servepb.LinkRequest{EdgeLabelIndex: Int32Tensor([]int32{1, 2, 3, 4}, 2, 2), NegAmount: 1}}
	}
	for _, tc := range []struct {
		name string
		edit func(r *servepb.SampleRequest)
		code codes.Code
		says string
	}{
		{"nan", func(r *servepb.SampleRequest) { r.Link.NegAmount = math.NaN() }, codes.InvalidArgument, "link.neg_amount"},
		{"negative", func(r *servepb.SampleRequest) { r.Link.NegAmount = -1 }, codes.InvalidArgument, "link.neg_amount"},
		{"huge", func(r *servepb.SampleRequest) { r.Link.NegAmount = 5000 }, codes.InvalidArgument, "link.neg_amount"},
		{"too many pairs", func(r *servepb.SampleRequest) { r.BatchSize, r.Link.NegAmount = MaxBatchSize/2, 1.5 }, codes.ResourceExhausted, "pairs in a batch"},
		{"seeds", func(r *servepb.SampleRequest) { r.Seeds = Int32Tensor([]int32{1}, 1) }, codes.InvalidArgument, "leave seeds and split unset"},
		{"split", func(r *servepb.SampleRequest) { r.Split = servepb.Split_SPLIT_TRAIN }, codes.InvalidArgument, "leave seeds and split unset"},
		{"owned", func(r *servepb.SampleRequest) { r.Owned = true }, codes.FailedPrecondition, "owned"},
		{"typed", func(r *servepb.SampleRequest) { r.InputType = "paper" }, codes.InvalidArgument, "typed graphs"},
		{"shape", func(r *servepb.SampleRequest) { r.Link.EdgeLabelIndex = Int32Tensor([]int32{1, 2, 3}, 3) }, codes.InvalidArgument, "want [2, M]"},
		{"float", func(r *servepb.SampleRequest) {
			r.Link.EdgeLabelIndex = &servepb.Tensor{Dtype: servepb.DType_DTYPE_FLOAT32, Shape: []int64{2, 1}, Data: make([]byte, 8)}
		}, codes.InvalidArgument, "want int32 or int64"},
		{"range", func(r *servepb.SampleRequest) { r.Link.EdgeLabelIndex = Int32Tensor([]int32{1, 2, 3, 2000}, 2, 2) }, codes.InvalidArgument, "node 2000 (row 1, column 1)"},
	} {
		r := ok()
		tc.edit(r)
		bs, err := c.Sample(context.Background(), r)
		if err == nil {
			_, err = bs.Recv()
		}
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.code, tc.says)
		}
	}
}

func FuzzDecodeEdgeIndex(f *testing.F) {
	f.Add(int32(servepb.DType_DTYPE_INT32), int64(2), int64(2), []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0})
	f.Add(int32(servepb.DType_DTYPE_INT64), int64(2), int64(1), make([]byte, 16))
	f.Add(int32(servepb.DType_DTYPE_INT32), int64(3), int64(1), make([]byte, 12))
	f.Add(int32(servepb.DType_DTYPE_INT32), int64(2), int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, dt int32, d0, d1 int64, data []byte) {
		tt := &servepb.Tensor{Dtype: servepb.DType(dt), Shape: []int64{d0, d1}, Data: data}
		src, dst, err := DecodeEdgeIndex(tt, "e", 10, 1000)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("error %T: %v", err, err)
			}
			return
		}
		if d0 != 2 || len(src) != int(d1) || len(dst) != len(src) {
			t.Fatalf("shape %v gave %d, %d pairs", tt.Shape, len(src), len(dst))
		}
		for i := range src {
			if src[i] < 0 || src[i] >= 10 || dst[i] < 0 || dst[i] >= 10 {
				t.Fatalf("pair %d: (%d, %d) out of range", i, src[i], dst[i])
			}
		}
	})
}
