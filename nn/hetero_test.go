package nn_test

import (
	"math"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/autograd/gradcheck"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// randomIn is a random n x m in-adjacency (rows sorted, repeats allowed)
// with some empty rows.
func randomIn(n, m int64, deg int, seed uint64) *graph.CSR {
	ip := make([]int64, n+1)
	var ix []int32
	for v := int64(0); v < n; v++ {
		s := rng.NewStream(rng.Derive(seed, uint64(v)))
		for range s.Below(uint64(2*deg + 1)) {
			ix = append(ix, int32(s.Below(uint64(m))))
		}
		ip[v+1] = int64(len(ix))
	}
	return &graph.CSR{NumRows: n, NumCols: m, Indptr: ip, Indices: ix}
}

func randomRows(t testing.TB, tp *autograd.Tape, rows, cols int, seed uint64) *autograd.Var {
	t.Helper()
	s := rng.NewStream(seed)
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = 2*s.Uniform01() - 1
	}
	x, err := tp.Upload(v, rows, cols)
	must(t, err)
	return x
}

// TestHSAGEOneTypeIsSAGE: with one node type and one relation, hsage is
// GraphSAGE: the same parameters give the same logits on the whole graph.
func TestHSAGEOneTypeIsSAGE(t *testing.T) {
	b := newCPU(t)
	const n, in, classes = 40, 7, 3
	g := randomIn(n, n, 3, 5)
	sage, err := nn.New(b, nn.Config{Kind: nn.KindSAGE, InDim: in, Hidden: 5, OutDim: classes, Layers: 2, NoDropout: true, Seed: 1})
	must(t, err)
	defer nn.FreeParams(b, sage.Params())
	hs, err := nn.NewHetero(b, nn.HeteroConfig{Kind: nn.KindHSAGE, Hidden: 5, OutDim: classes, Layers: 2, Seed: 2,
		Schema: nn.HeteroSchema{NodeTypes: []string{"node"}, InDims: []int{in}, Rels: []nn.HeteroRel{{Name: "edge"}}}})
	must(t, err)
	defer nn.FreeParams(b, hs.Params())
	saved, err := nn.SaveParams(b, sage.Params())
	must(t, err)
	for i := range saved { // layer0.self.weight -> layer0.edge.self.weight
		saved[i].Name = strings.Replace(saved[i].Name, ".", ".edge.", 1)
	}
	must(t, nn.LoadParams(b, hs.Params(), saved))

	blk, err := nn.UploadGraph(b, g)
	must(t, err)
	defer blk.Free()
	hb, err := nn.NewHeteroBlock(b, []nn.HeteroRel{{Name: "edge"}}, []int{n}, []int{n}, [][]int64{g.Indptr}, [][]int32{g.Indices})
	must(t, err)
	defer hb.Free()
	tp := autograd.NewTape(b)
	defer tp.Release()
	x := randomRows(t, tp, n, in, 9)
	want, err := sage.Forward(tp, x, []*nn.Block{blk, blk}, false, 0)
	must(t, err)
	got, err := hs.Forward(tp, []*autograd.Var{x}, []*nn.HeteroBlock{hb, hb}, false, 0)
	must(t, err)
	w, gv := download(t, b, want.Value), download(t, b, got.Value)
	for i := range w {
		if math.Abs(float64(w[i]-gv[i])) > 1e-5 {
			t.Fatalf("logit %d: hsage %v, sage %v", i, gv[i], w[i])
		}
	}
}

// typedSchema: papers (type 0, 3 features, target), authors (type 1, 2
// features), topics (type 2, none); authors -> papers, papers ->
// papers, topics -> papers, papers -> authors.
func typedSchema() (nn.HeteroSchema, []int64, []*graph.CSR) {
	s := nn.HeteroSchema{NodeTypes: []string{"paper", "author", "topic"}, InDims: []int{3, 2, 0}, Target: 0,
		Rels: []nn.HeteroRel{{Src: 1, Dst: 0, Name: "writes"}, {Src: 0, Dst: 0, Name: "cites"}, {Src: 2, Dst: 0, Name: "about"}, {Src: 0, Dst: 1, Name: "rev_writes"}}}
	n := []int64{9, 6, 4}
	in := []*graph.CSR{randomIn(9, 6, 2, 1), randomIn(9, 9, 2, 2), randomIn(9, 4, 1, 3), randomIn(6, 9, 2, 4)}
	return s, n, in
}

func fullTyped(t testing.TB, b backend.Backend, s nn.HeteroSchema, n []int64, in []*graph.CSR) *nn.HeteroBlock {
	nd := make([]int, len(n))
	for i := range n {
		nd[i] = int(n[i])
	}
	ip := make([][]int64, len(in))
	ix := make([][]int32, len(in))
	for r, g := range in {
		ip[r], ix[r] = g.Indptr, g.Indices
	}
	k, err := nn.NewHeteroBlock(b, s.Rels, nd, nd, ip, ix)
	must(t, err)
	return k
}

// TestRGCNHandComputed checks one R-GCN layer against the formula in
// float64: h_i' = W_0^paper h_i + b + sum_r mean_{j in N_r(i)} W_r h_j.
func TestRGCNHandComputed(t *testing.T) {
	b := newCPU(t)
	s, n, in := typedSchema()
	m, err := nn.NewHetero(b, nn.HeteroConfig{Kind: nn.KindRGCN, Schema: s, OutDim: 2, Layers: 1, Seed: 4})
	must(t, err)
	defer nn.FreeParams(b, m.Params())
	// One layer computing papers: writes, cites and about weights, the
	// paper root and bias; nothing for authors (rev_writes unused).
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "layer0.writes.neigh.weight layer0.cites.neigh.weight layer0.about.neigh.weight layer0.paper.root.weight layer0.paper.bias" {
		t.Fatalf("params: %s", got)
	}
	if !m.NeedsInput(0) || !m.NeedsInput(1) || !m.NeedsInput(2) {
		t.Fatal("a one-layer model reads every type with a relation into papers")
	}
	// A nonzero bias, so it is checked too.
	must(t, b.Upload(m.Params()[4].Value, []float32{0.25, -0.5}))
	saved, err := nn.SaveParams(b, m.Params())
	must(t, err)
	k := fullTyped(t, b, s, n, in)
	defer k.Free()
	tp := autograd.NewTape(b)
	defer tp.Release()
	xs := []*autograd.Var{randomRows(t, tp, 9, 3, 1), randomRows(t, tp, 6, 2, 2), nil}
	ones, err := tp.Upload([]float32{1, 1, 1, 1}, 4, 1)
	must(t, err)
	xs[2] = ones
	out, err := m.Forward(tp, xs, []*nn.HeteroBlock{k}, false, 0)
	must(t, err)
	got := download(t, b, out.Value)
	host := [][]float32{download(t, b, xs[0].Value), download(t, b, xs[1].Value), {1, 1, 1, 1}}
	width := []int{3, 2, 1}
	mul := func(x []float32, row, w int, p nn.NamedTensor, o int) float64 {
		var acc float64
		for j := range w {
			acc += float64(x[row*w+j]) * float64(p.Data[j*p.Cols+o])
		}
		return acc
	}
	for i := range 9 {
		for o := range 2 {
			want := mul(host[0], i, 3, saved[3], o) + float64(saved[4].Data[o])
			for r, src := range []int{1, 0, 2} {
				g := in[r]
				row := g.Indices[g.Indptr[i]:g.Indptr[i+1]]
				var sum float64
				for _, j := range row {
					sum += mul(host[src], int(j), width[src], saved[r], o)
				}
				if len(row) > 0 {
					want += sum / float64(len(row))
				}
			}
			if d := math.Abs(float64(got[i*2+o]) - want); d > 1e-5 {
				t.Fatalf("paper %d logit %d: %v, want %v", i, o, got[i*2+o], want)
			}
		}
	}
}

// TestHeteroGradients checks both kinds' gradients with central finite
// differences on a sampled two-layer batch (destinations without edges,
// a featureless type, different widths).
func TestHeteroGradients(t *testing.T) {
	b := newCPU(t)
	s, n, in := typedSchema()
	rels := make([]sample.Relation, len(in))
	for r, g := range in {
		rels[r] = sample.Relation{Src: s.Rels[r].Src, Dst: s.Rels[r].Dst, In: g}
	}
	smp, err := sample.NewHeteroSampler(n, rels, sample.HeteroConfig{Fanouts: [][]int{{2, 1}, {1, 2}, {1, 1}, {2, 2}}})
	must(t, err)
	mb, err := smp.Sample(0, []int32{0, 4, 8}, sample.Key{Seed: 3})
	must(t, err)
	for _, kind := range []string{nn.KindRGCN, nn.KindHSAGE} {
		t.Run(kind, func(t *testing.T) {
			m, err := nn.NewHetero(b, nn.HeteroConfig{Kind: kind, Schema: s, Hidden: 4, OutDim: 3, Layers: 2, Seed: 7})
			must(t, err)
			defer nn.FreeParams(b, m.Params())
			blocks, err := nn.UploadHeteroBlocks(b, s.Rels, mb)
			must(t, err)
			defer func() {
				for _, k := range blocks {
					k.Free()
				}
			}()
			var tensors []gradcheck.Tensor
			for _, p := range m.Params() {
				tensors = append(tensors, gradcheck.Tensor{Name: p.Name, Value: p.Value, Grad: p.Grad, Rows: p.Rows, Cols: p.Cols})
			}
			res, err := gradcheck.CheckStep(b, tensors, func(tp *autograd.Tape) (*autograd.Var, error) {
				xs := make([]*autograd.Var, 3)
				for ty := range 3 {
					if k := blocks[0].NumSrc[ty]; k > 0 {
						xs[ty] = randomRows(t, tp, k, s.InWidth(ty), uint64(ty))
					}
				}
				return m.Forward(tp, xs, blocks, false, 0)
			}, 5, gradcheck.ModelStep)
			if err != nil {
				t.Fatal(err)
			}
			if res.Elements < 50 {
				t.Fatalf("only %d elements compared", res.Elements)
			}
		})
	}
}

func TestHeteroModelErrors(t *testing.T) {
	b := newCPU(t)
	s, n, in := typedSchema()
	if _, err := nn.NewHetero(b, nn.HeteroConfig{Kind: "gat", Schema: s, OutDim: 2}); err == nil || !strings.Contains(err.Error(), "unknown typed model kind") {
		t.Fatalf("kind: %v", err)
	}
	bad := s
	bad.Rels = append([]nn.HeteroRel{}, s.Rels...)
	bad.Rels[1].Name = "writes"
	if _, err := nn.NewHetero(b, nn.HeteroConfig{Kind: nn.KindRGCN, Schema: bad, OutDim: 2}); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Fatalf("repeated relation: %v", err)
	}
	m, err := nn.NewHetero(b, nn.HeteroConfig{Kind: nn.KindHSAGE, Schema: s, OutDim: 2, Hidden: 4})
	must(t, err)
	defer nn.FreeParams(b, m.Params())
	k := fullTyped(t, b, s, n, in)
	defer k.Free()
	tp := autograd.NewTape(b)
	defer tp.Release()
	xs := []*autograd.Var{randomRows(t, tp, 9, 3, 1), randomRows(t, tp, 6, 2, 2), randomRows(t, tp, 4, 1, 3)}
	if _, err := m.Forward(tp, xs, []*nn.HeteroBlock{k}, false, 0); err == nil || !strings.Contains(err.Error(), "1 blocks for 2 layers") {
		t.Fatalf("block count: %v", err)
	}
	xs[1] = randomRows(t, tp, 5, 2, 2)
	if _, err := m.Forward(tp, xs, []*nn.HeteroBlock{k, k}, false, 0); err == nil || !strings.Contains(err.Error(), "input of type 1 is 5x2, want 6x2") {
		t.Fatalf("input shape: %v", err)
	}
	if _, err := nn.NewHeteroBlock(b, s.Rels, []int{9, 6, 4}, []int{9, 5, 4}, [][]int64{in[0].Indptr, in[1].Indptr, in[2].Indptr, in[3].Indptr},
		[][]int32{in[0].Indices, in[1].Indices, in[2].Indices, in[3].Indices}); err == nil || !strings.Contains(err.Error(), "type 1: 6 destinations and 5 sources") {
		t.Fatalf("block shape: %v", err)
	}
}
