package fullgraph

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// fwd is what a layer's forward pass keeps for its backward pass.
type fwd struct {
	xs   *autograd.SparseInput // sparse input after dropout (layer 0)
	x    backend.Buffer        // dense input after dropout
	mask backend.Buffer        // dropout mask of a dense input, nil without dropout
	agg  backend.Buffer        // sum over s of A_ds * payload_s (n x width)
	pre  backend.Buffer        // layer output before the activation (n x out)
	h    backend.Buffer        // ReLU(pre), nil for the last layer
}

func (f *fwd) out() backend.Buffer {
	if f.h != nil {
		return f.h
	}
	return f.pre
}

// project computes dst = X W for the layer input (sparse or dense).
func (w *worker) project(s *step, dst backend.Buffer, f *fwd, wt backend.Buffer, in, out int) {
	if !s.ok() {
		return
	}
	if f.xs != nil {
		s.do(w.b.SpMM(dst, f.xs.A, false, wt, f.xs.Values, 1, out))
		return
	}
	s.do(w.b.Gemm(false, false, w.n, out, in, 1, f.x, wt, 0, dst))
}

// weightGrad computes dst = X^T g (in x out) for the layer input.
func (w *worker) weightGrad(s *step, dst backend.Buffer, f *fwd, g backend.Buffer, in, out int) {
	if !s.ok() {
		return
	}
	if f.xs != nil {
		s.do(w.b.SpMM(dst, f.xs.A, true, g, f.xs.Values, 1, out))
		return
	}
	s.do(w.b.Gemm(true, false, in, out, w.n, 1, f.x, g, 0, dst))
}

// forward runs layer l on this device's rows. hin is the previous layer's
// output (nil for layer 0, which reads the features). In training mode it
// applies dropout and the staleness policy (epsScale scales Epsilon); in
// evaluation mode every block is exchanged exactly.
func (w *worker) forward(s *step, l int, hin backend.Buffer, train bool, stepSeed uint64, epsScale float64) *fwd {
	sp := &w.specs[l]
	n := w.n
	f := &fwd{}
	fseed := rng.Derive(stepSeed, uint64(l), seedFeature)
	drop := train && sp.p > 0
	if l == 0 && w.xs != nil {
		f.xs = w.xs
		if drop {
			nnz := w.xs.Values.Len()
			vals, mask := s.f32(nnz), s.f32(nnz)
			w.dropout(s, vals, mask, w.xs.Values, sp.p, fseed, w.xsOff)
			s.drop(mask) // the features get no gradient
			f.xs = &autograd.SparseInput{A: w.xs.A, Values: vals, Rows: w.xs.Rows, Cols: w.xs.Cols}
		}
	} else {
		if l == 0 {
			hin = w.xd
		}
		f.x = hin
		if drop {
			f.x, f.mask = s.f32(n*sp.in), s.f32(n*sp.in)
			w.dropout(s, f.x, f.mask, hin, sp.p, fseed, int64(w.lo)*int64(sp.in))
			if l == 0 { // the features get no gradient
				s.drop(f.mask)
				f.mask = nil
			}
		}
	}

	// The payload, and SAGE's self term.
	var payload, self backend.Buffer
	switch w.cfg.Model {
	case GCN:
		payload = f.x
		if sp.project {
			payload = s.f32(n * sp.out)
			w.project(s, payload, f, sp.w.Value, sp.in, sp.out)
		}
	case SAGE:
		self = s.f32(n * sp.out)
		w.project(s, self, f, sp.w.Value, sp.in, sp.out)
		payload = f.x
		if sp.project {
			payload = s.f32(n * sp.out)
			w.project(s, payload, f, sp.wn.Value, sp.in, sp.out)
		}
	}
	if !s.ok() {
		return f
	}
	// The staleness policy measures how much the block changed on its
	// dropout-free version: two dropout draws of the same embedding differ
	// by about 100%, and an older draw is not an error but another draw.
	clean := payload
	if drop && w.p > 1 && w.cfg.Staleness.Enabled {
		clean = hin
		if sp.project {
			in := &fwd{x: hin}
			if l == 0 && w.xs != nil {
				in = &fwd{xs: w.xs}
			}
			wt := sp.w.Value
			if w.cfg.Model == SAGE {
				wt = sp.wn.Value
			}
			clean = s.f32(n * sp.out)
			w.project(s, clean, in, wt, sp.in, sp.out)
		}
	}
	views := w.exchange(s, l, payload, clean, train, epsScale)
	f.agg = s.f32(n * sp.width)
	w.aggregate(s, f.agg, views, sp.width)
	if clean != payload && clean != hin {
		s.drop(clean)
	}
	if payload != f.x {
		s.drop(payload) // a projection: the backward pass does not read it
	}
	if !train {
		for r, v := range views { // temporary copies of the other blocks
			if r != w.rank {
				s.drop(v)
			}
		}
	}

	f.pre = s.f32(n * sp.out)
	switch w.cfg.Model {
	case GCN:
		src := f.agg
		if !sp.project {
			src = s.f32(n * sp.out)
			if s.ok() {
				s.do(w.b.Gemm(false, false, n, sp.out, sp.in, 1, f.agg, sp.w.Value, 0, src))
			}
		}
		if s.ok() {
			s.do(w.b.AddRowVector(f.pre, src, sp.bias.Value, n, sp.out))
		}
		if src != f.agg {
			s.drop(src)
		}
	case SAGE:
		neigh := f.agg
		if !sp.project {
			neigh = s.f32(n * sp.out)
			if s.ok() {
				s.do(w.b.Gemm(false, false, n, sp.out, sp.in, 1, f.agg, sp.wn.Value, 0, neigh))
			}
		}
		sum := s.f32(n * sp.out)
		if s.ok() {
			s.do(w.b.Axpby(sum, 1, self, 1, neigh))
		}
		if s.ok() {
			s.do(w.b.AddRowVector(f.pre, sum, sp.bias.Value, n, sp.out))
		}
		if neigh != f.agg {
			s.drop(neigh)
		}
		s.drop(self, sum)
	}
	if !sp.last {
		f.h = s.f32(n * sp.out)
		if s.ok() {
			s.do(w.b.Unary(backend.ReLU, 0, f.h, f.pre))
		}
	}
	return f
}

// aggregate computes dst = sum over source blocks s (in order) of
// A_ds * views[s].
func (w *worker) aggregate(s *step, dst backend.Buffer, views []backend.Buffer, width int) {
	first := true
	var tmp backend.Buffer
	for src, bm := range w.blocks {
		if bm.a == nil || !s.ok() {
			continue
		}
		x := views[src]
		if bm.cols != nil { // the rows of block src this device reads
			x = s.f32(bm.k * width)
			if s.ok() {
				s.do(w.b.GatherRows(x, views[src], bm.cols, w.lay.Size(src), width))
			}
		}
		out := dst
		if !first {
			if tmp == nil {
				tmp = s.f32(w.n * width)
			}
			out = tmp
		}
		if s.ok() {
			s.do(w.b.SpMM(out, bm.a, false, x, bm.w, 1, width))
		}
		if !first && s.ok() {
			s.do(w.b.Axpby(dst, 1, dst, 1, tmp))
		}
		first = false
	}
	if first && s.ok() {
		s.do(w.b.Fill(dst, 0)) // no entries at all
	}
}

// backward propagates dOut (the gradient of layer l's output) through
// layer l, writes the layer's parameter gradients and returns the
// gradient of its input (nil for layer 0).
func (w *worker) backward(s *step, l int, f *fwd, dOut backend.Buffer) backend.Buffer {
	sp := &w.specs[l]
	n := w.n
	b := w.b
	dPre := dOut
	if !sp.last {
		dPre = s.f32(n * sp.out)
		if s.ok() {
			s.do(b.UnaryBackward(backend.ReLU, 0, dPre, f.pre, f.h, dOut))
		}
	}
	needIn := l > 0
	var dx backend.Buffer
	if s.ok() {
		s.do(b.SumRows(sp.bias.Grad, dPre, n, sp.out))
	}
	switch w.cfg.Model {
	case GCN:
		if sp.project {
			dz := s.f32(n * sp.width)
			w.reduce(s, l, dPre, dz)
			w.weightGrad(s, sp.w.Grad, f, dz, sp.in, sp.out)
			if needIn {
				dx = s.f32(n * sp.in)
				if s.ok() {
					s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dz, sp.w.Value, 0, dx))
				}
			}
		} else {
			if s.ok() {
				s.do(b.Gemm(true, false, sp.in, sp.out, n, 1, f.agg, dPre, 0, sp.w.Grad))
			}
			if needIn {
				dAgg := s.f32(n * sp.in)
				if s.ok() {
					s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dPre, sp.w.Value, 0, dAgg))
				}
				dx = s.f32(n * sp.in)
				w.reduce(s, l, dAgg, dx)
			}
		}
	case SAGE:
		if sp.project {
			dzn := s.f32(n * sp.width)
			w.reduce(s, l, dPre, dzn)
			w.weightGrad(s, sp.wn.Grad, f, dzn, sp.in, sp.out)
			if needIn {
				dx = s.f32(n * sp.in)
				if s.ok() {
					s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dzn, sp.wn.Value, 0, dx))
				}
			}
		} else {
			if s.ok() {
				s.do(b.Gemm(true, false, sp.in, sp.out, n, 1, f.agg, dPre, 0, sp.wn.Grad))
			}
			if needIn {
				dAgg := s.f32(n * sp.in)
				if s.ok() {
					s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dPre, sp.wn.Value, 0, dAgg))
				}
				dx = s.f32(n * sp.in)
				w.reduce(s, l, dAgg, dx)
			}
		}
		w.weightGrad(s, sp.w.Grad, f, dPre, sp.in, sp.out)
		if needIn && s.ok() {
			s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dPre, sp.w.Value, 1, dx))
		}
	}
	if !needIn || !s.ok() {
		return nil
	}
	if f.mask == nil {
		return dx
	}
	dh := s.f32(n * sp.in)
	if s.ok() {
		s.do(b.Mul(dh, dx, f.mask))
	}
	return dh
}

// trainStep runs one epoch of training on this device's rows: forward
// with dropout and the staleness policy, loss over the local training
// nodes, backward with gradient reduction to block owners, the weight
// gradient all-reduce and the Adam step. It returns the global training
// loss (the mean over all training nodes, identical on every device).
func (w *worker) trainStep(epoch int, epsScale float64) (float64, error) {
	s := newStep(w.b)
	defer s.release()
	seed := rng.Derive(w.cfg.Seed, tagDropout, uint64(epoch))
	L := len(w.specs)
	fs := make([]*fwd, L)
	var h backend.Buffer
	first := w.act == nil
	if first {
		w.act = make([]int64, L)
	}
	for l := range w.specs {
		before := s.bytes
		fs[l] = w.forward(s, l, h, true, seed, epsScale)
		if s.err != nil {
			return 0, fmt.Errorf("layer %d forward: %w", l, s.err)
		}
		h = fs[l].out()
		if first {
			w.act[l] = s.bytes - before
		}
	}
	c := w.classes
	logits := fs[L-1].pre
	logp, dlogp, dlogits := s.f32(w.n*c), s.f32(w.n*c), s.f32(w.n*c)
	if !s.ok() {
		return 0, s.err
	}
	if err := w.b.LogSoftmax(logp, logits, w.n, c); err != nil {
		return 0, err
	}
	local := 0.0
	if w.nTrain == 0 { // no training nodes here: no gradient from the loss
		if err := w.b.Fill(dlogp, 0); err != nil {
			return 0, err
		}
	} else {
		var err error
		if local, err = w.b.NLLLoss(logp, w.trainRows, w.trainLabels, w.n, c); err != nil {
			return 0, err
		}
		scale := float32(1)
		if w.p > 1 {
			scale = float32(float64(w.nTrain) / float64(w.nTrainAll))
		}
		if err := w.b.NLLLossBackward(dlogp, w.trainRows, w.trainLabels, w.n, c, scale); err != nil {
			return 0, err
		}
	}
	loss, err := w.globalLoss(local)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
	}
	if err := w.b.LogSoftmaxBackward(dlogits, logp, dlogp, w.n, c); err != nil {
		return 0, err
	}
	g := dlogits
	for l := L - 1; l >= 0; l-- {
		g = w.backward(s, l, fs[l], g)
		if s.err != nil {
			return 0, fmt.Errorf("layer %d backward: %w", l, s.err)
		}
	}
	if err := w.allReduceGrads(); err != nil {
		return 0, err
	}
	if err := w.opt.Step(); err != nil {
		return 0, err
	}
	return loss, nil
}

// globalLoss combines the devices' mean losses over their own training
// nodes into the mean over all training nodes (in rank order, so every
// device gets the same bits).
func (w *worker) globalLoss(local float64) (float64, error) {
	if w.p == 1 {
		return local, nil
	}
	v := local * float64(w.nTrain)
	all := make([]int64, w.p)
	if err := w.c.AllGather(w.ctx, comm.I64(all), comm.I64([]int64{int64(math.Float64bits(v))})); err != nil {
		return 0, err
	}
	var sum float64
	for _, x := range all {
		sum += math.Float64frombits(uint64(x))
	}
	return sum / float64(w.nTrainAll), nil
}

// allReduceGrads sums the parameter gradients over the devices (staged
// through host memory), so every replica takes the same Adam step.
func (w *worker) allReduceGrads() error {
	if w.p == 1 {
		return nil
	}
	total := 0
	for _, p := range w.params {
		total += p.Len()
	}
	buf := grow(&w.hostA, total)
	off := 0
	for _, p := range w.params {
		if err := w.b.Download(buf[off:off+p.Len()], p.Grad); err != nil {
			return err
		}
		off += p.Len()
	}
	if err := w.c.AllReduce(w.ctx, comm.F32(buf), comm.Sum); err != nil {
		return err
	}
	off = 0
	for _, p := range w.params {
		if err := w.b.Upload(p.Grad, buf[off:off+p.Len()]); err != nil {
			return err
		}
		off += p.Len()
	}
	w.stats.AllReduceBytes += 4 * int64(total)
	return nil
}

func grow(b *[]float32, n int) []float32 {
	if cap(*b) < n {
		*b = make([]float32, n)
	}
	return (*b)[:n]
}

// evalResult is the accuracy of the train, validation and test nodes and
// the validation loss, over all devices.
type evalResult struct {
	acc     [3]float64
	valLoss float64
}

// evaluate runs the model without dropout, every block exchanged exactly,
// and scores the nodes of every device.
func (w *worker) evaluate() (evalResult, error) {
	// One step per layer: only the layer's output outlives it.
	var h backend.Buffer
	defer func() { w.b.Free(h) }()
	for l := range w.specs {
		s := newStep(w.b)
		f := w.forward(s, l, h, false, 0, 1)
		if s.err != nil {
			s.release()
			return evalResult{}, fmt.Errorf("evaluation layer %d: %w", l, s.err)
		}
		s.keep(f.out())
		s.release()
		w.b.Free(h)
		h = f.out()
	}
	c := w.classes
	logits := make([]float32, w.n*c)
	if err := w.b.Download(logits, h); err != nil {
		return evalResult{}, err
	}
	// correct[0..2], then the validation loss sum as float64 bits.
	local := make([]int64, 4)
	for i := range w.sets {
		es := &w.sets[i]
		correct, loss := score(logits, c, es.local, es.labels)
		local[i] = int64(correct)
		if i == 1 {
			local[3] = int64(math.Float64bits(loss))
		}
	}
	all := local
	if w.p > 1 {
		all = make([]int64, 4*w.p)
		if err := w.c.AllGather(w.ctx, comm.I64(all), comm.I64(local)); err != nil {
			return evalResult{}, err
		}
	}
	var r evalResult
	var correct [3]int64
	for d := 0; d < w.p; d++ {
		for i := range 3 {
			correct[i] += all[4*d+i]
		}
		r.valLoss += math.Float64frombits(uint64(all[4*d+3]))
	}
	for i := range 3 {
		if t := w.sets[i].total; t > 0 {
			r.acc[i] = float64(correct[i]) / float64(t)
		}
	}
	if t := w.sets[1].total; t > 0 {
		r.valLoss /= float64(t)
	}
	return r, nil
}

// score counts the rows whose argmax (ties to the lower class) is the
// label and sums their cross-entropy.
func score(logits []float32, c int, rows, labels []int32) (correct int, loss float64) {
	for i, r := range rows {
		row := logits[int(r)*c : int(r+1)*c]
		best, mx := 0, math.Inf(-1)
		for k, x := range row {
			if float64(x) > mx {
				best, mx = k, float64(x)
			}
		}
		var z float64
		for _, x := range row {
			z += math.Exp(float64(x) - mx)
		}
		label := labels[i]
		loss += mx + math.Log(z) - float64(row[label])
		if int32(best) == label {
			correct++
		}
	}
	return correct, loss
}
