package serve

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// smallHetero is the hetero preset at 600 papers (3 node types, 4
// relations).
func smallHetero(t testing.TB) *dataset.Hetero {
	t.Helper()
	cfg := gen.HeteroPreset()
	cfg.Papers = 600
	h, err := gen.GenerateHetero(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// heteroFromMFG derives the PyG-layout typed batch from the message-flow
// graph HeteroSampler.Sample makes for the same seeds and key (an
// independent path to SampleHeteroFrontier's): hop k keeps, for every
// relation, the rows of Blocks[L-1-k] whose destination hop k-1 added.
func heteroFromMFG(t *testing.T, mb *sample.HeteroMiniBatch, rels []sample.Relation, inputType int) *HeteroPyGBatch {
	t.Helper()
	T, L := len(mb.Seeds), len(mb.Blocks)
	b := &HeteroPyGBatch{InputType: inputType, BatchSize: len(mb.Seeds[inputType]), NodeIDs: make([][]graph.NodeID, T),
		NumSampledNodes: make([][]int64, T), Src: make([][]int32, len(rels)), Dst: make([][]int32, len(rels)), NumSampledEdges: make([][]int64, len(rels))}
	local := make([]map[int32]int32, T)
	add := func(ty int, v int32) int32 {
		if p, ok := local[ty][v]; ok {
			return p
		}
		p := int32(len(b.NodeIDs[ty]))
		local[ty][v] = p
		b.NodeIDs[ty] = append(b.NodeIDs[ty], v)
		return p
	}
	for ty := range T {
		local[ty] = map[int32]int32{}
		b.NumSampledNodes[ty] = []int64{0}
	}
	for _, v := range mb.Seeds[inputType] {
		add(inputType, v)
	}
	b.NumSampledNodes[inputType][0] = int64(b.BatchSize)
	lo := make([]int, T)
	for hop := range L {
		blk := &mb.Blocks[L-1-hop]
		hi := make([]int, T)
		row := make([]map[int32]int, T)
		for ty := range T {
			hi[ty] = len(b.NodeIDs[ty])
			row[ty] = map[int32]int{}
			for i, v := range blk.SrcNodes[ty][:blk.NumDst[ty]] {
				row[ty][v] = i
			}
		}
		for r, rel := range rels {
			rb := &blk.Rels[r]
			n := 0
			for k := lo[rel.Dst]; k < hi[rel.Dst]; k++ {
				i, ok := row[rel.Dst][b.NodeIDs[rel.Dst][k]]
				if !ok {
					t.Fatalf("hop %d: the block lacks node %d of type %d", hop, b.NodeIDs[rel.Dst][k], rel.Dst)
				}
				for _, j := range rb.Indices[rb.Indptr[i]:rb.Indptr[i+1]] {
					b.Src[r] = append(b.Src[r], add(rel.Src, blk.SrcNodes[rel.Src][j]))
					b.Dst[r] = append(b.Dst[r], int32(k))
					n++
				}
			}
			b.NumSampledEdges[r] = append(b.NumSampledEdges[r], int64(n))
		}
		for ty := range T {
			b.NumSampledNodes[ty] = append(b.NumSampledNodes[ty], int64(len(b.NodeIDs[ty])-hi[ty]))
		}
		lo = hi
	}
	return b
}

func TestTypedMatchesSampler(t *testing.T) {
	h := smallHetero(t)
	_, addr := start(t, Options{Hetero: h, RingDir: ringDir(t)})
	c := dial(t, addr, ClientOptions{})
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Capabilities, []string{CapLink, CapBFloat16, CapTyped}) || len(info.NodeTypes) != 3 || len(info.EdgeTypes) != len(h.EdgeTypes) || info.NumNodes != h.NumNodes() {
		t.Fatalf("info: %d node types, %d edge types, %d nodes", len(info.NodeTypes), len(info.EdgeTypes), info.NumNodes)
	}
	for i, nt := range info.NodeTypes {
		if nt.Name != h.NodeTypes[i].Name || nt.NumNodes != h.NodeTypes[i].NumNodes || nt.FeatDim != int64(h.NodeTypes[i].FeatDim) || nt.Labeled != (i == h.Target) {
			t.Fatalf("node type %d: %v", i, nt)
		}
	}
	target := h.NodeTypes[h.Target].Name
	R := len(h.EdgeTypes)
	fan := make([][]int, R)
	var rf []*servepb.RelationFanouts
	for r := range R {
		fan[r] = []int{3 + r%2, r % 3} // some relations left out at hop 1
		rf = append(rf, &servepb.RelationFanouts{Relation: uint32(R - 1 - r), Fanouts: []int32{int32(3 + (R-1-r)%2), int32((R - 1 - r) % 3)}})
	}
	hs, err := sample.NewHeteroSampler(newHet(t, h).n, newHet(t, h).rels, sample.HeteroConfig{Fanouts: fan})
	if err != nil {
		t.Fatal(err)
	}
	req := &servepb.SampleRequest{InputType: target, Split: servepb.Split_SPLIT_TRAIN, BatchSize: 32, RelationFanouts: rf,
		Shuffle: true, Seed: 3, Epoch: 1, WithFeatures: true, WithLabels: true, Workers: 3}
	got := collect(t, c, req)
	e := Epoch{BatchSize: 32, Shuffle: true, Seed: 3, Epoch: 1, World: 1}
	order, _ := Plan(len(h.Train), e)
	if len(got) != NumBatches(len(h.Train), 32, 1, false) || len(got) < 3 {
		t.Fatalf("%d batches for %d seeds", len(got), len(h.Train))
	}
	edges := 0
	for i, m := range got {
		pos := order[i*32 : min((i+1)*32, len(order))]
		seeds := make([]graph.NodeID, len(pos))
		in := make([]int64, len(pos))
		for k, p := range pos {
			seeds[k], in[k] = h.Train[p], int64(p)
		}
		mb, err := hs.Sample(h.Target, seeds, e.Key(i))
		if err != nil {
			t.Fatal(err)
		}
		want := heteroFromMFG(t, mb, newHet(t, h).rels, h.Target)
		if m.NId != nil || m.EdgeIndex != nil || int(m.BatchSize) != len(seeds) || !slices.Equal(int64s(t, m.InputId), in) {
			t.Fatalf("batch %d: header %v", i, m.BatchSize)
		}
		if len(m.Nodes) != 3 || len(m.Edges) != R {
			t.Fatalf("batch %d: %d node types, %d relations", i, len(m.Nodes), len(m.Edges))
		}
		for ty, tn := range m.Nodes {
			nid := int32s(t, tn.NId)
			if int(tn.Type) != ty || !slices.Equal(nid, want.NodeIDs[ty]) || !slices.Equal(tn.NumSampledNodes, want.NumSampledNodes[ty]) {
				t.Fatalf("batch %d type %d: n_id or counts differ", i, ty)
			}
			nt := h.NodeTypes[ty]
			x := float32s(t, tn.X)
			if !slices.Equal(tn.X.Shape, []int64{int64(len(nid)), int64(nt.FeatDim)}) {
				t.Fatalf("batch %d type %d: x shape %v", i, ty, tn.X.Shape)
			}
			for k, v := range nid {
				if !slices.Equal(x[k*nt.FeatDim:(k+1)*nt.FeatDim], nt.Features[int(v)*nt.FeatDim:(int(v)+1)*nt.FeatDim]) {
					t.Fatalf("batch %d type %d: x row %d is not node %d's", i, ty, k, v)
				}
			}
			if (tn.Y != nil) != (ty == h.Target) {
				t.Fatalf("batch %d type %d: y %v", i, ty, tn.Y != nil)
			}
			if tn.Y != nil {
				for k, y := range int32s(t, tn.Y) {
					if y != h.Labels[nid[k]] {
						t.Fatalf("batch %d: y[%d] is not node %d's label", i, k, nid[k])
					}
				}
			}
		}
		if got := int32s(t, m.Nodes[h.Target].NId)[:len(seeds)]; !slices.Equal(got, seeds) {
			t.Fatalf("batch %d: the seeds do not come first", i)
		}
		for r, te := range m.Edges {
			ei := int32s(t, te.EdgeIndex)
			n := len(want.Src[r])
			if int(te.Relation) != r || !slices.Equal(te.EdgeIndex.Shape, []int64{2, int64(n)}) || !slices.Equal(ei[:n], want.Src[r]) ||
				!slices.Equal(ei[n:], want.Dst[r]) || !slices.Equal(te.NumSampledEdges, want.NumSampledEdges[r]) {
				t.Fatalf("batch %d relation %d: edge_index differs", i, r)
			}
			// Every sampled edge is an edge of the relation.
			et := h.EdgeTypes[r]
			sn, dn := int32s(t, m.Nodes[et.Src].NId), int32s(t, m.Nodes[et.Dst].NId)
			for k := range n {
				u, v := sn[ei[k]], dn[ei[n+k]]
				if !slices.Contains(et.In.Indices[et.In.Indptr[v]:et.In.Indptr[v+1]], u) {
					t.Fatalf("batch %d relation %d: (%d, %d) is no edge", i, r, u, v)
				}
			}
			edges += n
		}
	}
	if edges == 0 {
		t.Fatal("no edges sampled")
	}
	// fanouts for every relation, seeds of a non-target type.
	req = &servepb.SampleRequest{InputType: h.NodeTypes[(h.Target+1)%3].Name, Seeds: Int32Tensor([]int32{5, 0, 9}, 3), BatchSize: 2, Fanouts: []int32{2, 2}}
	got = collect(t, c, req)
	if len(got) != 2 || got[0].Nodes[(h.Target+1)%3].NumSampledNodes[0] != 2 || got[0].Nodes[h.Target].NumSampledNodes[0] != 0 {
		t.Fatalf("typed seeds of type %d: %d batches", (h.Target+1)%3, len(got))
	}
}

func newHet(t *testing.T, h *dataset.Hetero) *heteroServed {
	hs, err := newHeteroServed(h)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func TestTypedRefusals(t *testing.T) {
	h := smallHetero(t)
	_, addr := start(t, Options{Hetero: h, RingDir: ringDir(t)})
	c := dial(t, addr, ClientOptions{})
	target := h.NodeTypes[h.Target].Name
	other := h.NodeTypes[(h.Target+1)%3].Name
	ok := func() *servepb.SampleRequest {
		return &servepb.SampleRequest{InputType: target, Split: servepb.Split_SPLIT_TRAIN, BatchSize: 8, Fanouts: []int32{2}}
	}
	rf := func(rels ...uint32) []*servepb.RelationFanouts {
		var out []*servepb.RelationFanouts
		for _, r := range rels {
			out = append(out, &servepb.RelationFanouts{Relation: r, Fanouts: []int32{2}})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(r *servepb.SampleRequest)
		code codes.Code
		says string
	}{
		{"type", func(r *servepb.SampleRequest) { r.InputType = "nope" }, codes.InvalidArgument, `"nope" is no node type`},
		{"both fanouts", func(r *servepb.SampleRequest) { r.RelationFanouts = rf(0, 1, 2, 3) }, codes.InvalidArgument, "give one of them"},
		{"missing relation", func(r *servepb.SampleRequest) { r.Fanouts, r.RelationFanouts = nil, rf(0, 1) }, codes.InvalidArgument, "each relation once"},
		{"repeated relation", func(r *servepb.SampleRequest) { r.Fanouts, r.RelationFanouts = nil, rf(0, 1, 1, 2) }, codes.InvalidArgument, "relation_fanouts[2]"},
		{"hops differ", func(r *servepb.SampleRequest) {
			r.Fanouts, r.RelationFanouts = nil, rf(0, 1, 2, 3)
			r.RelationFanouts[3].Fanouts = []int32{1, 1}
		}, codes.InvalidArgument, "one per hop"},
		{"fanout", func(r *servepb.SampleRequest) { r.Fanouts = []int32{-2} }, codes.InvalidArgument, "fanouts"},
		{"split of another type", func(r *servepb.SampleRequest) { r.InputType = other }, codes.FailedPrecondition, "labeled node type"},
		{"seeds range", func(r *servepb.SampleRequest) {
			r.Split, r.Seeds = 0, Int32Tensor([]int32{int32(h.NodeTypes[h.Target].NumNodes)}, 1)
		}, codes.InvalidArgument, "seeds[0]"},
		{"owned", func(r *servepb.SampleRequest) { r.Owned = true }, codes.FailedPrecondition, "owned"},
		{"relation fanouts untyped", func(r *servepb.SampleRequest) { r.InputType, r.RelationFanouts = "", rf(0) }, codes.InvalidArgument, "only with input_type"},
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
	// Typed batches do not travel through the ring.
	sc := openShm(t, c, ok(), &servepb.ShmRequest{})
	if _, err := sc.next(); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not SampleShm") {
		t.Fatalf("typed SampleShm: %v", err)
	}
	// A homogeneous server has no types; its erased graph still serves
	// homogeneous requests.
	_, addr2 := start(t, Options{})
	c2 := dial(t, addr2, ClientOptions{})
	bs, err := c2.Sample(context.Background(), ok())
	if err == nil {
		_, err = bs.Recv()
	}
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not typed") {
		t.Fatalf("typed request to an untyped server: %v", err)
	}
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 64, Fanouts: []int32{3}, WithFeatures: true}
	got := collect(t, c, req)
	if len(got) == 0 || got[0].NId == nil || got[0].X.Shape[1] != 32 {
		t.Fatalf("homogeneous request on the erased graph: %d batches", len(got))
	}
}
