package train

import (
	"fmt"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Replica makes RunHetero one of Size data-parallel replicas of one run
// (Options.Replica; package dsp/engine's RunHetero runs one per device,
// each on its own back end and goroutine). Every replica runs the same
// trainer, Loop and step; they differ only in their batches: every epoch
// the training nodes are shuffled as on one device and Deal gives each
// replica its share, and replica r's batch i is global batch i*Size+r
// (its sampling key and dropout seed). Between the backward pass and the
// optimizer step Reduce averages the gradients (and the step's loss)
// over the replicas, so they start equal (the seed's weights) and stay
// equal. Replica 0 evaluates, logs, shows the progress bar and offers
// epochs to Options.Keep; the others do none of that.
type Replica struct {
	Rank, Size int
	// Deal deals one epoch's order of the training nodes: batches[r][i]
	// is replica r's batch i (distinct nodes); every replica gets
	// Batches batches, every epoch.
	Deal    func(order []int32) (batches [][][]int32, err error)
	Batches int
	// Reduce replaces grads with its mean over the replicas: a float32
	// buffer on the run's back end holding every parameter's gradient,
	// in Params order, then the step's loss. It is a collective (every
	// replica calls it once per step); required when Size > 1.
	Reduce func(grads backend.Buffer) error
	// EvalSampler makes replica 0's sampler for Eval "sampled" (nil:
	// HeteroConfig.NewSampler's, on the host); Options.TypedSampler makes
	// the training batches' sampler, a collective one in a multi-device
	// run.
	EvalSampler NewTypedSampler
	// Done, when set, is called with the trained parameters after the
	// last epoch, before they are freed (the replica check).
	Done func(params []*nn.Param) error
	// Barrier, when set, is a barrier of the replicas on the host,
	// called once: after the first step's backward pass, before its
	// gradients' collective. That step runs with products warming
	// (backend.ProductFamilies), so each replica meets its products'
	// kernels for the first time while no collective is in flight: on
	// GPUs of one process a kernel's first use can wait for the devices,
	// and so for a collective that waits for this replica (docs/cuda.md,
	// Pinned GEMM algorithms).
	Barrier func() error
	// Prepared says the dataset given to RunHetero is already
	// HeteroConfig.Graph's of one CheckHetero accepted: the replicas
	// share the caller's checks and reverse relations instead of each
	// repeating them.
	Prepared bool
}

// check validates r for a run of numTrain training nodes.
func (r *Replica) check() error {
	bad := func(format string, args ...any) error {
		return &ConfigError{Field: "replica", Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.Size < 1 || r.Rank < 0 || r.Rank >= r.Size:
		return bad("rank %d of %d replicas", r.Rank, r.Size)
	case r.Deal == nil:
		return bad("no dealing of the batches")
	case r.Batches < 1:
		return bad("%d batches per epoch", r.Batches)
	case r.Size > 1 && r.Reduce == nil:
		return bad("%d replicas and no gradient reduction", r.Size)
	}
	return nil
}

// lead reports whether the runner is not a replica, or is replica 0.
func (r *runner) lead() bool { return r.rep == nil || r.rep.Rank == 0 }

// deal sets the replica's batches of the current epoch's order.
func (r *runner) deal() error {
	all, err := r.rep.Deal(r.order)
	if err != nil {
		return fmt.Errorf("dealing the batches: %w", err)
	}
	if len(all) != r.rep.Size {
		return fmt.Errorf("dealing the batches: %d shares for %d replicas", len(all), r.rep.Size)
	}
	if got := len(all[r.rep.Rank]); got != r.numBatches {
		return fmt.Errorf("dealing the batches: %d batches for replica %d, want %d", got, r.rep.Rank, r.numBatches)
	}
	r.mine = all[r.rep.Rank]
	return nil
}

// shareGrads makes every parameter's gradient a view of one flat buffer
// (then the step's loss) that Replica.Reduce averages in one collective;
// the parameters' own gradient buffers are put aside until free.
func (r *runner) shareGrads(params []*nn.Param) error {
	total := 0
	for _, p := range params {
		if p.Grad == nil || p.Len() <= 0 {
			return &RunError{Op: "gradients", Err: fmt.Errorf("parameter %q has no gradient", p.Name)}
		}
		total += p.Len()
	}
	flat, err := r.b.Alloc(backend.Float32, total+1)
	if err != nil {
		return &RunError{Op: "gradients", Err: err}
	}
	views := make([]backend.Buffer, len(params))
	off := 0
	for i, p := range params {
		if views[i], err = backend.View(flat, off, p.Len()); err != nil {
			r.b.Free(flat)
			return &RunError{Op: "gradients", Err: err}
		}
		off += p.Len()
	}
	if r.lossSlot, err = backend.View(flat, total, 1); err != nil {
		r.b.Free(flat)
		return &RunError{Op: "gradients", Err: err}
	}
	r.flat = flat
	for i, p := range params {
		r.oldGrads = append(r.oldGrads, p.Grad)
		p.Grad = views[i]
	}
	return nil
}

// unshareGrads gives the parameters their own gradient buffers back (so
// that FreeParams frees them) and frees the flat one.
func (r *runner) unshareGrads(params []*nn.Param) {
	if r.flat == nil {
		return
	}
	for i, p := range params {
		if i < len(r.oldGrads) {
			p.Grad = r.oldGrads[i]
		}
	}
	r.oldGrads = nil
	r.b.Free(r.flat)
	r.flat, r.lossSlot = nil, nil
}

// warming says whether the step about to run is a replica's first,
// whose products warm their families before Replica.Barrier.
func (r *runner) warming() bool { return r.rep != nil && r.rep.Barrier != nil && !r.warmed }

// setWarming turns the back end's product warming on or off, where it
// counts product families.
func (r *runner) setWarming(on bool) {
	if pf, ok := r.b.(backend.ProductFamilies); ok {
		pf.WarmProducts(on)
	}
}

// reduce averages the step's gradients and loss over the replicas
// (Replica.Reduce) and returns the mean loss. The first step's waits at
// Replica.Barrier first.
func (r *runner) reduce(loss float64) (float64, error) {
	if err := r.b.Upload(r.lossSlot, []float32{float32(loss)}); err != nil {
		return 0, err
	}
	if r.warming() {
		r.warmed = true
		r.setWarming(false)
		if err := r.rep.Barrier(); err != nil {
			return 0, fmt.Errorf("after the first step: %w", err)
		}
	}
	if err := r.rep.Reduce(r.flat); err != nil {
		return 0, fmt.Errorf("gradient all-reduce: %w", err)
	}
	host := []float32{0}
	if err := r.b.Download(host, r.lossSlot); err != nil {
		return 0, err
	}
	return float64(host[0]), nil
}
