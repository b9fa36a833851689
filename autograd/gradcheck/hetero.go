package gradcheck

import (
	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// heteroCases check the typed models (nn.HeteroModel, both kinds) over
// two typed blocks in training mode: three node types of input widths 4,
// 3 and none (a constant column), four relations, a type no relation
// enters, destinations without edges, through LogSoftmax and NLLLoss.
func heteroCases() []gcase {
	var cs []gcase
	for _, kind := range []string{nn.KindRGCN, nn.KindHSAGE} {
		cs = append(cs, gcase{name: "Model_" + kind, build: heteroCase(kind), model: true})
	}
	return cs
}

func heteroCase(kind string) func(e *env) ([]Tensor, Func) {
	return func(e *env) ([]Tensor, Func) {
		schema := nn.HeteroSchema{NodeTypes: []string{"a", "b", "c"}, InDims: []int{4, 3, 0}, Target: 0,
			Rels: []nn.HeteroRel{{Src: 1, Dst: 0, Name: "b_a"}, {Src: 0, Dst: 0, Name: "a_a"}, {Src: 2, Dst: 0, Name: "c_a"}, {Src: 0, Dst: 1, Name: "a_b"}}}
		m, err := nn.NewHetero(e.b, nn.HeteroConfig{Kind: kind, Schema: schema, Hidden: 3, OutDim: 3, Layers: 2,
			Dropout: 0.2, InputDropout: 0.1, Seed: 8})
		e.must(err)
		for _, p := range m.Params() {
			e.must(e.b.Upload(p.Value, e.values(p.Len(), 0.05)))
		}
		tensors := e.paramTensors(m.Params())
		block := func(numDst, numSrc []int) *nn.HeteroBlock {
			ip := make([][]int64, len(schema.Rels))
			ix := make([][]int32, len(schema.Rels))
			for r, rel := range schema.Rels {
				e.seed++
				ip[r], ix[r] = randomCSR(numDst[rel.Dst], numSrc[rel.Src], rng.Derive(98, e.seed))
			}
			k, err := nn.NewHeteroBlock(e.b, schema.Rels, numDst, numSrc, ip, ix)
			e.must(err)
			e.t.Cleanup(k.Free)
			return k
		}
		blocks := []*nn.HeteroBlock{block([]int{6, 4, 3}, []int{9, 7, 5}), block([]int{4, 0, 0}, []int{6, 4, 3})}
		xa, xb := e.tensor("x_a", 9, 4, 0), e.tensor("x_b", 7, 3, 0)
		ones := e.buf(backend.Float32, []float32{1, 1, 1, 1, 1}, 5)
		rows := e.int32s([]int32{0, 1, 2, 3})
		labels := e.int32s([]int32{2, 0, 1, 2})
		return append(tensors, xa, xb), func(t *autograd.Tape) (*autograd.Var, error) {
			va, err := leaf(t, xa)
			if err != nil {
				return nil, err
			}
			vb, err := leaf(t, xb)
			if err != nil {
				return nil, err
			}
			vc, err := t.Const(ones, 5, 1)
			if err != nil {
				return nil, err
			}
			out, err := m.Forward(t, []*autograd.Var{va, vb, vc}, blocks, true, 17)
			if err != nil {
				return nil, err
			}
			lp, err := t.LogSoftmax(out)
			if err != nil {
				return nil, err
			}
			l, _, err := t.NLLLoss(lp, rows, labels)
			return l, err
		}
	}
}
