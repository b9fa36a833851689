package fullgraph

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// fwd is what a layer's forward pass keeps for its backward pass: the
// input after dropout, the aggregation when the weight gradient needs it,
// and the output. Dropout masks and pre-activations are not kept: the
// gradient through the previous layer's ReLU and this layer's dropout is
// recovered from x alone (see fusedOps.reluMaskScale).
type fwd struct {
	xs   *autograd.SparseInput // sparse input after dropout (layer 0)
	x    backend.Buffer        // dense input after dropout (the input itself without dropout)
	agg  backend.Buffer        // A * input, when the input is the payload (not projected); else nil
	out  backend.Buffer        // ReLU(pre) (GAT: ELU(pre)), or pre (the logits) for the last layer
	kept int64                 // bytes of the above this layer allocated

	// GAT (gat.go): the ELU has no derivative recoverable from its
	// dropped-out output, so a hidden layer keeps pre, and the next layer
	// its input dropout mask; att holds the attention state.
	pre, mask backend.Buffer
	att       *attention
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
	before := s.bytes
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
			var mask backend.Buffer
			f.x, mask = s.f32(n*sp.in), s.f32(n*sp.in)
			w.dropout(s, f.x, mask, hin, sp.p, fseed, int64(w.lo)*int64(sp.in))
			if w.cfg.Model == GAT && train && l > 0 {
				f.mask = mask // the ELU's gradient cannot recover it
			} else {
				s.drop(mask) // recovered from x in the backward pass
			}
		}
	}

	// The payload (the input, or projected by the neighbor weight when
	// that is narrower; GAT: always projected), and SAGE's self term.
	payload := f.x
	if sp.project {
		wt := sp.w.Value
		if w.cfg.Model == SAGE {
			wt = sp.wn.Value
		}
		payload = s.f32(n * sp.width)
		w.project(s, payload, f, wt, sp.in, sp.width)
	}
	var self backend.Buffer
	if w.cfg.Model == SAGE {
		self = s.f32(n * sp.out)
		w.project(s, self, f, sp.w.Value, sp.in, sp.out)
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
			clean = s.f32(n * sp.width)
			w.project(s, clean, in, wt, sp.in, sp.width)
		}
	}

	// Aggregation over every source block at once: the own block is the
	// fresh payload, the others as exchanged (or cached).
	src := payload
	if w.p > 1 {
		var xall backend.Buffer
		if train {
			xall = w.persistent(s, &w.st[l].xall, w.lay.N*sp.width)
		} else {
			xall = s.f32(w.lay.N * sp.width)
		}
		var redraw func(dst, src backend.Buffer, r int)
		if l == 0 && !sp.project && w.xs == nil && w.cfg.Staleness.Enabled {
			// The payload is the features (dropped out): constant.
			redraw = func(dst, src backend.Buffer, r int) {
				if !drop {
					s.do(w.b.Copy(dst, src))
					return
				}
				mask := s.f32(dst.Len())
				lo, _ := w.lay.Range(r)
				w.dropoutAs(s, dst, mask, src, sp.p, fseed, int64(lo)*int64(sp.in), r)
				s.drop(mask)
			}
		}
		w.exchange(s, l, xall, payload, clean, train, epsScale, redraw)
		src = xall
	}
	if clean != payload && clean != hin {
		s.drop(clean)
	}
	if w.cfg.Model == GAT {
		if src != payload {
			s.drop(payload) // copied into the N-row matrix
		}
		w.attend(s, l, f, src, train, stepSeed)
		f.kept = s.bytes - before
		return f
	}
	agg := s.f32(n * sp.width)
	if s.ok() {
		if w.agg.a != nil {
			s.do(w.b.SpMM(agg, w.agg.a, false, src, w.agg.w, 1, sp.width))
		} else {
			s.do(w.b.Fill(agg, 0))
		}
	}
	if src != payload && !train {
		s.drop(src) // the evaluation's temporary N-row matrix
	}
	if payload != f.x {
		s.drop(payload) // a projection: the backward pass does not read it
	}

	// The output: act(self + neighbors + bias).
	relu := !sp.last
	switch w.cfg.Model {
	case GCN:
		if sp.project {
			f.out = agg // A X W + b in place: the backward pass needs no aggregation
		} else {
			f.agg = agg
			f.out = s.f32(n * sp.out)
			if s.ok() {
				s.do(w.b.Gemm(false, false, n, sp.out, sp.in, 1, agg, sp.w.Value, 0, f.out))
			}
		}
		if s.ok() {
			s.do(w.fused.biasAct(f.out, f.out, nil, sp.bias.Value, n, sp.out, relu))
		}
	case SAGE:
		neigh := agg
		if !sp.project {
			f.agg = agg
			neigh = s.f32(n * sp.out)
			if s.ok() {
				s.do(w.b.Gemm(false, false, n, sp.out, sp.in, 1, agg, sp.wn.Value, 0, neigh))
			}
		}
		if s.ok() {
			s.do(w.fused.biasAct(self, self, neigh, sp.bias.Value, n, sp.out, relu))
		}
		s.drop(neigh)
		f.out = self
	}
	f.kept = s.bytes - before
	return f
}

// backward propagates dPre, the gradient of layer l's output before its
// activation, through layer l, writes the layer's parameter gradients
// and returns the gradient of layer l-1's output before its activation
// (nil for layer 0). It frees what layer l kept and dPre.
func (w *worker) backward(s *step, l int, fs []*fwd, dPre backend.Buffer, train bool) backend.Buffer {
	if w.cfg.Model == GAT {
		return w.gatBackward(s, l, fs, dPre)
	}
	f := fs[l]
	sp := &w.specs[l]
	n := w.n
	b := w.b
	needIn := l > 0
	var dx backend.Buffer
	if s.ok() {
		s.do(b.SumRows(sp.bias.Grad, dPre, n, sp.out))
	}
	// Both models: the weight on the aggregated input is W (GCN) or
	// W_neigh (SAGE).
	wa := sp.w
	if w.cfg.Model == SAGE {
		wa = sp.wn
	}
	if sp.project {
		dz := s.f32(n * sp.width)
		w.reduce(s, l, dz, w.transposed(l, dPre, sp.width))
		w.weightGrad(s, wa.Grad, f, dz, sp.in, sp.out)
		if needIn {
			dx = s.f32(n * sp.in)
			if s.ok() {
				s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dz, wa.Value, 0, dx))
			}
		}
		s.drop(dz)
	} else {
		if s.ok() {
			s.do(b.Gemm(true, false, sp.in, sp.out, n, 1, f.agg, dPre, 0, wa.Grad))
		}
		if needIn {
			dAgg := s.f32(n * sp.in)
			if s.ok() {
				s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dPre, wa.Value, 0, dAgg))
			}
			dx = s.f32(n * sp.in)
			w.reduce(s, l, dx, w.transposed(l, dAgg, sp.width))
			s.drop(dAgg)
		}
	}
	if w.cfg.Model == SAGE {
		w.weightGrad(s, sp.w.Grad, f, dPre, sp.in, sp.out)
		if needIn && s.ok() {
			s.do(b.Gemm(false, true, n, sp.in, sp.out, 1, dPre, sp.w.Value, 1, dx))
		}
	}
	s.drop(dPre, f.agg)
	f.agg = nil
	if !needIn || !s.ok() {
		return nil
	}
	// Through this layer's dropout and the previous layer's ReLU.
	keep := float32(1)
	if train && sp.p > 0 {
		keep = 1 / (1 - sp.p)
	}
	s.do(w.fused.reluMaskScale(dx, dx, f.x, keep))
	s.drop(f.x)
	f.x = nil
	return dx
}

// gradients computes the parameter gradients of one epoch on this
// device's rows: forward with dropout and the staleness policy, loss over
// the local training nodes, backward with gradient reduction to block
// owners and the weight-gradient all-reduce. It returns the global
// training loss (the mean over all training nodes, identical on every
// device).
func (w *worker) gradients(epoch int, epsScale float64) (float64, error) {
	s := newStep(w.b)
	defer s.release()
	seed := w.cfg.DropoutSeed(epoch, 0)
	L := len(w.specs)
	fs := make([]*fwd, L)
	var h backend.Buffer
	first := w.act == nil
	if first {
		w.act = make([]int64, L)
	}
	for l := range w.specs {
		fs[l] = w.forward(s, l, h, true, seed, epsScale)
		if s.err != nil {
			return 0, fmt.Errorf("layer %d forward: %w", l, s.err)
		}
		if first {
			w.act[l] = fs[l].kept
		}
		if l > 0 && fs[l].x != h {
			s.drop(h) // the previous output: its ReLU mask is recovered from x
			fs[l-1].out = nil
		}
		h = fs[l].out
	}
	if w.task != nil {
		g, loss, err := w.taskGrad(s, epoch, fs[L-1].out)
		if err != nil {
			return 0, err
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
		}
		s.drop(fs[L-1].out)
		fs[L-1].out = nil
		return loss, w.backwardAll(s, fs, g)
	}
	c := w.classes
	logits := fs[L-1].out
	logp, dlogp := s.f32(w.n*c), s.f32(w.n*c)
	if !s.ok() {
		return 0, s.err
	}
	if err := w.b.LogSoftmax(logp, logits, w.n, c); err != nil {
		return 0, err
	}
	s.drop(logits)
	fs[L-1].out = nil
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
	dlogits := s.f32(w.n * c)
	if !s.ok() {
		return 0, s.err
	}
	if err := w.b.LogSoftmaxBackward(dlogits, logp, dlogp, w.n, c); err != nil {
		return 0, err
	}
	s.drop(logp, dlogp)
	return loss, w.backwardAll(s, fs, dlogits)
}

// backwardAll runs the layers' backward passes from g, the gradient of
// the last layer's output, and sums the parameter gradients over the
// devices.
func (w *worker) backwardAll(s *step, fs []*fwd, g backend.Buffer) error {
	for l := len(w.specs) - 1; l >= 0; l-- {
		g = w.backward(s, l, fs, g, true)
		if s.err != nil {
			return fmt.Errorf("layer %d backward: %w", l, s.err)
		}
	}
	return w.allReduceGrads()
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
	if err := w.c.AllGather(w.ctx, cpu.WrapI64(all), cpu.WrapI64([]int64{int64(math.Float64bits(v))})); err != nil {
		return 0, err
	}
	var sum float64
	for _, x := range all {
		sum += math.Float64frombits(uint64(x))
	}
	return sum / float64(w.nTrainAll), nil
}

// allReduceGrads sums the parameter gradients over the devices (through
// the device communicator, else staged through host memory), so every
// replica takes the same Adam step.
func (w *worker) allReduceGrads() error {
	if w.p == 1 {
		return nil
	}
	total := 0
	for _, p := range w.params {
		total += p.Len()
	}
	w.stats.AllReduceBytes += 4 * int64(total)
	if w.dc != nil {
		return w.allReduceDevice(total)
	}
	buf := grow(&w.hostA, total)
	off := 0
	for _, p := range w.params {
		if err := w.b.Download(buf[off:off+p.Len()], p.Grad); err != nil {
			return err
		}
		off += p.Len()
	}
	if err := w.c.AllReduce(w.ctx, cpu.WrapF32(buf), comm.Sum); err != nil {
		return err
	}
	off = 0
	for _, p := range w.params {
		if err := w.b.Upload(p.Grad, buf[off:off+p.Len()]); err != nil {
			return err
		}
		off += p.Len()
	}
	return nil
}

// allReduceDevice packs the gradients into one device buffer, all-reduces
// it through dc and unpacks it.
func (w *worker) allReduceDevice(total int) error {
	if w.gradFlat == nil {
		buf, err := w.b.AllocRaw(backend.Float32, total)
		if err != nil {
			return err
		}
		w.gradFlat = buf
	}
	each := func(fn func(v, g backend.Buffer) error) error {
		off := 0
		for _, p := range w.params {
			v, err := view(w.gradFlat, off, p.Len())
			if err != nil {
				return err
			}
			if err := fn(v, p.Grad); err != nil {
				return err
			}
			off += p.Len()
		}
		return nil
	}
	if err := each(func(v, g backend.Buffer) error { return w.b.Copy(v, g) }); err != nil {
		return err
	}
	if err := w.dc.AllReduce(w.ctx, w.gradFlat, comm.Sum); err != nil {
		return err
	}
	return each(func(v, g backend.Buffer) error { return w.b.Copy(g, v) })
}

func grow(b *[]float32, n int) []float32 {
	if cap(*b) < n {
		*b = make([]float32, n)
	}
	return (*b)[:n]
}

// evaluate runs the model without dropout, every block exchanged exactly,
// and tallies the nodes of every device (train.Score on each, the tallies
// summed in rank order).
func (w *worker) evaluate() (train.Tally, error) {
	// One step per layer: only the layer's output outlives it.
	var h backend.Buffer
	defer func() { w.b.Free(h) }()
	for l := range w.specs {
		s := newStep(w.b)
		f := w.forward(s, l, h, false, 0, 1)
		if s.err != nil {
			s.release()
			return train.Tally{}, fmt.Errorf("evaluation layer %d: %w", l, s.err)
		}
		s.keep(f.out)
		s.release()
		w.b.Free(h)
		h = f.out
	}
	t, err := train.Score(w.b, h, w.n, w.classes, &w.splits)
	if err != nil || w.p == 1 {
		return t, err
	}
	// Correct and counted nodes of the three splits, then the validation
	// loss as float64 bits.
	const k = 7
	local := make([]int64, k)
	for s := range 3 {
		local[s], local[3+s] = t.Correct[s], t.Count[s]
	}
	local[6] = int64(math.Float64bits(t.ValLoss))
	all := make([]int64, k*w.p)
	if err := w.c.AllGather(w.ctx, cpu.WrapI64(all), cpu.WrapI64(local)); err != nil {
		return train.Tally{}, err
	}
	var sum train.Tally
	for d := 0; d < w.p; d++ {
		var o train.Tally
		for s := range 3 {
			o.Correct[s], o.Count[s] = all[k*d+s], all[k*d+3+s]
		}
		o.ValLoss = math.Float64frombits(uint64(all[k*d+6]))
		sum.Add(o)
	}
	return sum, nil
}
