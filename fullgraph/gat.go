package fullgraph

import (
	"fmt"

	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// GAT on the distributed engine.
//
// A GAT layer (nn.GATConv, self-loops added as PyG does) computes, per
// head h, Z = X W, the source term el_j = <Z_j^h, a_l^h>, the destination
// term er_i = <Z_i^h, a_r^h>, the logits LeakyReLU(er_i + el_j) of every
// edge j -> i, their softmax over i's incoming edges (then attention
// dropout) and out_i = sum_j alpha_ij Z_j^h, concatenated over the heads
// (hidden layers) or averaged (the last layer). Everything but Z_j and
// el_j is local to the owner of i, so device d needs from the other
// devices only the rows of Z they own.
//
// The payload is Z alone (heads x dim columns), not Z with el: el_j is a
// function of Z_j and a_l, which every replica holds, so receivers
// compute it themselves (N x heads dot products of dim, far less than the
// layer's nnz x heads x dim aggregation). That moves heads floats fewer
// per row, forward and backward (a gradient contribution has the
// payload's width: el's gradient folds into Z's, dZ_j += del_j a_l, on
// the device that read row j), and a block reused under staleness is
// combined with the current a_l instead of the a_l it was sent with. The
// historical-embedding cache, skip-broadcast and the bounds apply to Z as
// to GCN's and GraphSAGE's payloads.
//
// Backward: device d computes the gradient of every row of Z it read, in
// an N-row matrix (the SpMM's transpose over its rows, then el's term),
// adds er's term to its own block and sends each owner the rows of its
// block that d read, gathered (Layout.Used); the owner sums them with
// reduce, as GCN's contributions. The gradients of W, a_l, a_r and the
// bias are per-device partial sums, all-reduced with the other
// parameters. With one device every primitive call is the one nn's
// GATConv makes on the autograd tape, in the tape's order, so the run is
// bit-identical to it.

// gatSlope is the LeakyReLU slope of the attention logits (as nn and the
// GAT paper).
const gatSlope = 0.2

// newGATConv makes layer l of the GAT model of cfg as nn.New does: hidden
// layers concatenate Heads heads of Hidden, the last layer averages
// OutHeads heads of outDim.
func newGATConv(b backend.Backend, cfg *Config, l, in, outDim int, seed uint64) (*nn.GATConv, error) {
	if l == cfg.Layers-1 {
		return nn.NewGATConv(b, layerName(l), in, outDim, cfg.OutHeads, false, gatSlope, float32(cfg.AttnDrop), seed)
	}
	return nn.NewGATConv(b, layerName(l), in, cfg.Hidden, cfg.Heads, true, gatSlope, float32(cfg.AttnDrop), seed)
}

// gatState is what a device holds for GAT besides the layers: selector
// matrices for the per-row attention terms (N x 1 and n x 1, every row one
// entry in column 0, as nn.Block's: an SDDMM dot over them with a 1 x
// heads*dim vector gives each row's per-head dot products), the rows of
// every other block this device reads (where its gradient contributions
// come from) and the global position of its first edge (for attention
// dropout masks).
type gatState struct {
	selAll, selOwn backend.Sparse
	sendIdx        []backend.Buffer // Layout.Used[rank][t], int32, local to block t
	edgeOff        int64
}

func (g *gatState) free(b backend.Backend) {
	if g.selOwn != g.selAll && g.selOwn != nil {
		b.FreeSparse(g.selOwn)
	}
	if g.selAll != nil {
		b.FreeSparse(g.selAll)
	}
	for _, x := range g.sendIdx {
		b.Free(x)
	}
	*g = gatState{}
}

// initGAT sets up w.gat and the head-averaging matrices of the layers.
func (w *worker) initGAT() error {
	g := &w.gat
	selector := func(rows int) (backend.Sparse, error) {
		ip := make([]int64, rows+1)
		for i := range rows {
			ip[i+1] = int64(i + 1)
		}
		sel, err := w.b.NewSparse(rows, 1, ip, make([]int32, rows))
		if err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: selector: %w", w.rank, err)
		}
		return sel, nil
	}
	var err error
	if g.selAll, err = selector(w.lay.N); err != nil {
		return err
	}
	g.selOwn = g.selAll
	if w.p > 1 {
		if g.selOwn, err = selector(w.n); err != nil {
			return err
		}
	}
	g.sendIdx = make([]backend.Buffer, w.p)
	for t := 0; t < w.p; t++ {
		if t != w.rank && w.lay.NNZ(w.rank, t) > 0 {
			if g.sendIdx[t], err = uploadI32(w.b, w.lay.Used[w.rank][t]); err != nil {
				return err
			}
		}
	}
	for r := 0; r < w.rank; r++ {
		g.edgeOff += int64(w.lay.Rows[r].NNZ())
	}
	for l := range w.specs {
		sp := &w.specs[l]
		if !sp.mean {
			continue
		}
		// nn.GATConv.meanHeads: M[h*dim+d, d] = 1/heads.
		m := make([]float32, sp.width*sp.dim)
		for h := 0; h < sp.heads; h++ {
			for d := 0; d < sp.dim; d++ {
				m[(h*sp.dim+d)*sp.dim+d] = 1 / float32(sp.heads)
			}
		}
		if sp.meanM, err = upload(w.b, m); err != nil {
			return err
		}
	}
	return nil
}

// attention is what a GAT layer's forward pass keeps for its backward
// pass besides its input: the N-row payload matrix it aggregated (one
// device: the payload itself; else the layer's historical matrix, which
// outlives the step), the logits before LeakyReLU, the softmax and the
// attention dropout mask (nil without), nnz x heads each.
type attention struct {
	z, score, alpha, mask backend.Buffer
}

// attend computes the output of GAT layer l on this device's rows from
// zall, the N x width payload matrix (its own block fresh, the others as
// exchanged or cached), and sets f.out (ELU(pre) and f.pre for hidden
// layers, the logits for the last). In training mode it applies attention
// dropout, with the masks one device draws for these edges, and keeps
// f.att.
func (w *worker) attend(s *step, l int, f *fwd, zall backend.Buffer, train bool, stepSeed uint64) {
	sp := &w.specs[l]
	n, heads, width := w.n, sp.heads, sp.width
	a, b := w.agg.a, w.b
	zown := w.block(s, zall, w.rank, width)
	if !s.ok() {
		return
	}
	nnz := a.NNZ()
	el, er, score, alpha := s.f32(w.lay.N*heads), s.f32(n*heads), s.f32(nnz*heads), s.f32(nnz*heads)
	if !s.ok() {
		return
	}
	s.do(b.SDDMM(backend.SDDMMDot, el, w.gat.selAll, zall, sp.attnL.Value, heads, sp.dim))
	s.do(b.SDDMM(backend.SDDMMDot, er, w.gat.selOwn, zown, sp.attnR.Value, heads, sp.dim))
	s.do(b.SDDMM(backend.SDDMMAdd, score, a, er, el, heads, 1))
	s.drop(el, er)
	s.do(b.Unary(backend.LeakyReLU, sp.slope, alpha, score))
	s.do(b.EdgeSoftmax(alpha, a, alpha, heads))
	att := &attention{z: zall, score: score, alpha: alpha}
	weights := alpha
	if train && sp.attnP > 0 {
		weights, att.mask = s.f32(nnz*heads), s.f32(nnz*heads)
		w.dropout(s, weights, att.mask, alpha, sp.attnP, rng.Derive(stepSeed, uint64(l), seedAttention), w.gat.edgeOff*int64(heads))
	}
	h := s.f32(n * width)
	if !s.ok() {
		return
	}
	s.do(b.SpMM(h, a, false, zall, weights, heads, width))
	if weights != alpha {
		s.drop(weights) // recomputed from alpha and the mask
	}
	out := h
	if sp.mean {
		out = s.f32(n * sp.out)
		if !s.ok() {
			return
		}
		s.do(b.Gemm(false, false, n, sp.out, width, 1, h, sp.meanM, 0, out))
		s.drop(h)
	}
	s.do(b.AddRowVector(out, out, sp.bias.Value, n, sp.out))
	f.out = out
	if !sp.last {
		f.pre, f.out = out, s.f32(n*sp.out)
		if s.ok() {
			s.do(b.Unary(backend.ELU, 1, f.out, f.pre))
		}
	}
	if !train {
		s.drop(score, alpha, f.pre)
		f.pre = nil
		return
	}
	f.att = att
}

// gathered is GAT's contribution: the rows of block t of dzall (the
// gradient of every payload row this device read) that it read, or its
// whole own block.
func (w *worker) gathered(s *step, dzall backend.Buffer, width int) contribution {
	return func(dst backend.Buffer, t int) error {
		blk := w.block(s, dzall, t, width)
		if blk == nil {
			return nil // the view's error is in s
		}
		if t == w.rank {
			return w.b.Copy(dst, blk)
		}
		return w.b.GatherRows(dst, blk, w.gat.sendIdx[t], w.lay.Size(t), width)
	}
}

// gatBackward is backward for GAT layer l in training mode (the dropout
// masks it applies are the ones the forward pass kept): dPre is the
// gradient of its output before the ELU (the logits' for the last
// layer). It writes the
// layer's parameter gradients and returns the gradient of layer l-1's
// output before its ELU (nil for layer 0), freeing what the layers kept.
// The calls follow the order of the tape's backward pass over nn.GATConv.
func (w *worker) gatBackward(s *step, l int, fs []*fwd, dPre backend.Buffer) backend.Buffer {
	f, sp := fs[l], &w.specs[l]
	att := f.att
	n, heads, width := w.n, sp.heads, sp.width
	a, b := w.agg.a, w.b
	if !s.ok() || att == nil {
		return nil
	}
	nnz := a.NNZ()
	s.do(b.SumRows(sp.bias.Grad, dPre, n, sp.out))
	dh := dPre
	if sp.mean {
		dh = s.f32(n * width)
		if s.ok() {
			s.do(b.Gemm(false, true, n, width, sp.out, 1, dPre, sp.meanM, 0, dh))
		}
	}
	// The aggregation out = A(alpha) Z: into every row of Z this device
	// read, and into the attention weights.
	weights := att.alpha
	if att.mask != nil {
		weights = s.f32(nnz * heads)
		if s.ok() {
			s.do(b.Mul(weights, att.alpha, att.mask))
		}
	}
	dzall, dalpha := s.f32(w.lay.N*width), s.f32(nnz*heads)
	if !s.ok() {
		return nil
	}
	s.do(b.SpMM(dzall, a, true, dh, weights, heads, width))
	s.do(b.SDDMM(backend.SDDMMDot, dalpha, a, dh, att.z, heads, sp.dim))
	if weights != att.alpha {
		s.drop(weights)
	}
	if dh != dPre {
		s.drop(dh)
	}
	s.drop(dPre)
	if att.mask != nil {
		s.do(b.Mul(dalpha, dalpha, att.mask))
		s.drop(att.mask)
	}
	// Attention dropout, edge softmax, LeakyReLU, score = er_i + el_j.
	de, lrelu := s.f32(nnz*heads), s.f32(nnz*heads)
	if !s.ok() {
		return nil
	}
	s.do(b.EdgeSoftmaxBackward(de, a, att.alpha, dalpha, heads))
	s.drop(dalpha, att.alpha)
	s.do(b.Unary(backend.LeakyReLU, sp.slope, lrelu, att.score))
	s.do(b.UnaryBackward(backend.LeakyReLU, sp.slope, de, att.score, lrelu, de))
	s.drop(lrelu, att.score)
	der, del := s.f32(n*heads), s.f32(w.lay.N*heads)
	if !s.ok() {
		return nil
	}
	s.do(b.EdgeSum(der, a, false, de, heads))
	s.do(b.EdgeSum(del, a, true, de, heads))
	s.drop(de)
	// er_i = <Z_i, a_r> on the own rows, then el_j = <Z_j, a_l> on all:
	// dZ += d(er) a_r (own block), dZ += d(el) a_l; the attention vectors'
	// gradients are this device's partial sums.
	tmp := s.f32(w.lay.N * width)
	tOwn := s.view(tmp, 0, n*width)
	zown, dOwn := w.block(s, att.z, w.rank, width), w.block(s, dzall, w.rank, width)
	if !s.ok() {
		return nil
	}
	s.do(b.SpMM(tOwn, w.gat.selOwn, false, sp.attnR.Value, der, heads, width))
	s.do(b.Axpby(dOwn, 1, tOwn, 1, dOwn))
	s.do(b.SpMM(sp.attnR.Grad, w.gat.selOwn, true, zown, der, heads, width))
	s.do(b.SpMM(tmp, w.gat.selAll, false, sp.attnL.Value, del, heads, width))
	s.do(b.Axpby(dzall, 1, tmp, 1, dzall))
	s.do(b.SpMM(sp.attnL.Grad, w.gat.selAll, true, att.z, del, heads, width))
	s.drop(tmp, der, del)
	s.drop(att.z) // one device: the payload; else the historical matrix (not the step's)
	f.att = nil

	// The payload's gradient: every reader's rows of this block, summed.
	dz := dzall
	if w.p > 1 {
		dz = s.f32(n * width)
		w.reduce(s, l, dz, w.gathered(s, dzall, width))
		s.drop(dzall)
	}
	w.weightGrad(s, sp.w.Grad, f, dz, sp.in, width)
	if l == 0 || !s.ok() {
		s.drop(dz)
		return nil
	}
	dx := s.f32(n * sp.in)
	if s.ok() {
		s.do(b.Gemm(false, true, n, sp.in, width, 1, dz, sp.w.Value, 0, dx))
	}
	s.drop(dz)
	// Through this layer's input dropout and the previous layer's ELU
	// (whose output y the back end may read: recomputed when dropout
	// replaced it).
	prev := fs[l-1]
	y := f.x
	if f.mask != nil {
		y = s.f32(n * sp.in)
		if s.ok() {
			s.do(b.Mul(dx, dx, f.mask))
			s.do(b.Unary(backend.ELU, 1, y, prev.pre))
		}
	}
	if s.ok() {
		s.do(b.UnaryBackward(backend.ELU, 1, dx, prev.pre, y, dx))
	}
	s.drop(y, f.x, f.mask, prev.pre)
	f.x, f.mask, prev.pre = nil, nil, nil
	return dx
}
