package dpbench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Data is what a rank trains on.
type Data struct {
	Train   []int32 // training node ids
	Labels  []int32 // per node
	FeatDim int
	Classes int
}

// Config is one run.
type Config struct {
	Steps, Warmup int // timed steps, untimed steps before them
	BatchSize     int // per rank
	Hidden        int
	Layers        int
	Fanouts       []int
	Seed          uint64 // model init and shuffling; the same on every rank
}

// Result is one rank's outcome.
type Result struct {
	Rank, Size int
	Kind       string
	Steps      int
	MsPerStep  float64 // wall time of the timed steps / Steps
	GradElems  int     // elements all-reduced per step
	Loss       float32 // loss of the last step (this rank's batch)
	ParamSum   float64 // sum of every parameter after training (equal on every rank)
	// Phases are the mean host times of the timed steps' parts, in
	// microseconds: getting the batch (and queueing the next), queueing
	// forward and loss, queueing backward, the all-reduce call, queueing
	// the optimizer step. Work queued on a device may run later, so a
	// phase that waits (a synchronous all-reduce) absorbs what was queued
	// before it.
	Phases Phases
}

// Phases are mean host microseconds per step (see Result).
type Phases struct {
	Batch, Forward, Backward, AllReduce, Step float64
}

func (r Result) String() string {
	p := r.Phases
	return fmt.Sprintf("rank %d: dpstep kind=%s size=%d steps=%d ms/step=%.3f grad_elems=%d loss=%.5f params=%.9e phases_us batch=%.0f forward=%.0f backward=%.0f allreduce=%.0f step=%.0f",
		r.Rank, r.Kind, r.Size, r.Steps, r.MsPerStep, r.GradElems, r.Loss, r.ParamSum, p.Batch, p.Forward, p.Backward, p.AllReduce, p.Step)
}

// view aliases elements [off, off+n) of a buffer (backend.View).
func view(b backend.Buffer, off, n int) (backend.Buffer, error) {
	v, err := backend.View(b, off, n)
	if err != nil {
		return nil, fmt.Errorf("dpbench: %w", err)
	}
	return v, nil
}

// FlatGrads points every parameter's gradient at a slice of one new
// zeroed flat buffer (params in order) and returns it with a function
// that restores the original gradient buffers and frees it. Call it
// before any gradient is accumulated.
func FlatGrads(b backend.Backend, params []*nn.Param) (backend.Buffer, func(), error) {
	total := 0
	for _, p := range params {
		if p.Len() <= 0 || p.Grad == nil {
			return nil, nil, fmt.Errorf("dpbench: parameter %q has no gradient", p.Name)
		}
		total += p.Len()
	}
	if total == 0 {
		return nil, nil, fmt.Errorf("dpbench: no parameters")
	}
	flat, err := b.Alloc(backend.Float32, total)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Fill(flat, 0); err != nil {
		b.Free(flat)
		return nil, nil, err
	}
	old := make([]backend.Buffer, len(params))
	off := 0
	for i, p := range params {
		v, err := view(flat, off, p.Len())
		if err != nil {
			for j := range i {
				params[j].Grad = old[j]
			}
			b.Free(flat)
			return nil, nil, err
		}
		old[i], p.Grad = p.Grad, v
		off += p.Len()
	}
	restore := func() {
		for i, p := range params {
			p.Grad = old[i]
		}
		b.Free(flat)
	}
	return flat, restore, nil
}

// Run trains with c for cfg.Warmup+cfg.Steps steps and times the last
// cfg.Steps. Rank r takes every Size-th batch of a shuffled epoch from r
// on; the model starts the same on every rank, so the all-reduced mean
// gradient keeps the parameters equal.
func Run(ctx context.Context, b backend.Backend, c comm.Comm, src train.BatchSource, d Data, cfg Config) (Result, error) {
	res := Result{Rank: c.Rank(), Size: c.Size(), Kind: c.Kind(), Steps: cfg.Steps}
	switch {
	case cfg.Steps <= 0, cfg.Warmup < 0, cfg.BatchSize <= 0, cfg.Hidden <= 0, cfg.Layers <= 0:
		return res, fmt.Errorf("dpbench: bad config %+v", cfg)
	case len(cfg.Fanouts) != cfg.Layers:
		return res, fmt.Errorf("dpbench: %d fanouts for %d layers", len(cfg.Fanouts), cfg.Layers)
	case len(d.Train) < cfg.BatchSize*c.Size():
		return res, fmt.Errorf("dpbench: %d training nodes for %d ranks of batch %d", len(d.Train), c.Size(), cfg.BatchSize)
	case d.FeatDim <= 0 || d.Classes <= 0:
		return res, fmt.Errorf("dpbench: feature width %d, classes %d", d.FeatDim, d.Classes)
	}
	model, err := nn.New(b, nn.Config{Kind: nn.KindSAGE, InDim: d.FeatDim, Hidden: cfg.Hidden, OutDim: d.Classes,
		Layers: cfg.Layers, Dropout: 0.5, InputDropout: 0.5, Seed: cfg.Seed})
	if err != nil {
		return res, err
	}
	params := model.Params()
	defer nn.FreeParams(b, params)
	flat, restore, err := FlatGrads(b, params)
	if err != nil {
		return res, err
	}
	defer restore()
	res.GradElems = flat.Len()
	opt := optim.NewAdam(b, params, 0.003, 0.9, 0.999, 1e-8, 0)
	defer opt.Free()

	// Batches: full batches of one shuffle, dealt round-robin to ranks.
	ids := append([]int32(nil), d.Train...)
	rand.New(rand.NewPCG(cfg.Seed, 1)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var mine [][]int32
	for i := 0; (i+1)*cfg.BatchSize <= len(ids); i++ {
		if i%c.Size() == c.Rank() {
			mine = append(mine, ids[i*cfg.BatchSize:(i+1)*cfg.BatchSize])
		}
	}
	key := func(step int) sample.Key {
		return sample.Key{Seed: cfg.Seed, Epoch: step / len(mine), Batch: step%len(mine)*c.Size() + c.Rank()}
	}
	seeds := func(step int) []int32 { return mine[step%len(mine)] }

	rowsHost := make([]int32, cfg.BatchSize)
	labels := make([]int32, cfg.BatchSize)
	for i := range rowsHost {
		rowsHost[i] = int32(i)
	}
	rows, err := b.Alloc(backend.Int32, cfg.BatchSize)
	if err != nil {
		return res, err
	}
	defer b.Free(rows)
	if err := b.Upload(rows, rowsHost); err != nil {
		return res, err
	}
	var ph Phases // sums over the timed steps
	step := func(s int) error {
		timed := s >= cfg.Warmup
		t0 := time.Now()
		lap := func(d *float64) {
			if timed {
				t := time.Now()
				*d += float64(t.Sub(t0).Nanoseconds()) / 1e3
				t0 = t
			}
		}
		ss := seeds(s)
		blocks, x, release, err := src.Batch(ss, key(s))
		if err != nil {
			return err
		}
		defer release()
		if err := src.Prefetch(seeds(s+1), key(s+1)); err != nil {
			return err
		}
		for i, v := range ss {
			if int(v) >= len(d.Labels) || d.Labels[v] < 0 || int(d.Labels[v]) >= d.Classes {
				return fmt.Errorf("dpbench: node %d has no valid label", v)
			}
			labels[i] = d.Labels[v]
		}
		// A fresh buffer per step: the previous step may still read its labels.
		lb, err := b.Alloc(backend.Int32, len(ss))
		if err != nil {
			return err
		}
		defer b.Free(lb)
		if err := b.Upload(lb, labels); err != nil {
			return err
		}
		lap(&ph.Batch)
		t := autograd.NewTape(b)
		defer t.Release()
		xv, err := t.Const(x, blocks[0].NumSrc, d.FeatDim)
		if err != nil {
			return err
		}
		logits, err := model.Forward(t, xv, blocks, true, rng.Derive(cfg.Seed, uint64(s), uint64(c.Rank())))
		if err != nil {
			return err
		}
		logp, err := t.LogSoftmax(logits)
		if err != nil {
			return err
		}
		lv, err := nn.NLLLoss(t, logp, rows, lb)
		if err != nil {
			return err
		}
		if err := b.Fill(flat, 0); err != nil {
			return err
		}
		lap(&ph.Forward)
		if err := t.Backward(lv); err != nil {
			return err
		}
		lap(&ph.Backward)
		if err := c.AllReduce(ctx, flat, comm.Mean); err != nil {
			return err
		}
		lap(&ph.AllReduce)
		if err := opt.Step(); err != nil {
			return err
		}
		lap(&ph.Step)
		if s == cfg.Warmup+cfg.Steps-1 {
			var l [1]float32
			if err := b.Download(l[:], lv.Value); err != nil {
				return err
			}
			res.Loss = l[0]
		}
		return nil
	}
	for s := 0; s < cfg.Warmup; s++ {
		if err := step(s); err != nil {
			return res, fmt.Errorf("dpbench: warm-up step %d: %w", s, err)
		}
	}
	if err := settle(ctx, b, c); err != nil {
		return res, err
	}
	t0 := time.Now()
	for s := cfg.Warmup; s < cfg.Warmup+cfg.Steps; s++ {
		if err := step(s); err != nil {
			return res, fmt.Errorf("dpbench: step %d: %w", s, err)
		}
	}
	if err := c.Sync(ctx); err != nil {
		return res, err
	}
	if err := b.Synchronize(); err != nil {
		return res, err
	}
	res.MsPerStep = float64(time.Since(t0).Microseconds()) / 1e3 / float64(cfg.Steps)
	k := float64(cfg.Steps)
	res.Phases = Phases{Batch: ph.Batch / k, Forward: ph.Forward / k, Backward: ph.Backward / k, AllReduce: ph.AllReduce / k, Step: ph.Step / k}
	if math.IsNaN(float64(res.Loss)) || res.Loss <= 0 {
		return res, fmt.Errorf("dpbench: last loss %v", res.Loss)
	}
	for _, p := range params {
		s, err := b.Sum(p.Value)
		if err != nil {
			return res, err
		}
		res.ParamSum += s
	}
	return res, nil
}

// settle waits for outstanding work and lines the ranks up.
func settle(ctx context.Context, b backend.Backend, c comm.Comm) error {
	if err := c.Sync(ctx); err != nil {
		return err
	}
	if err := b.Synchronize(); err != nil {
		return err
	}
	return c.Barrier(ctx)
}
