package fullgraph

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Task is a training objective other than node classification
// (Options.Task; nil: node classification on the dataset's labels). The
// layers, the communication (skip-broadcast and staleness included) and
// the optimizer are the engine's: a task sees the final layer's output
// of every node, all-gathered, and gives back each rank's gradient of
// it, which flows back through the layers to their owners. Package
// link/multi's task is link prediction: each rank scores the training
// pairs whose source it owns.
type Task interface {
	// OutDim is the final layer's width.
	OutDim() int
	// Start is called once before training: oldToNew maps the
	// caller's node IDs to the engine's (nil when unchanged) and
	// offsets[r] to offsets[r+1] are rank r's IDs.
	Start(oldToNew []int32, offsets []int64) error
	// Replica makes rank's part of the task (its parameters) on b.
	Replica(rank int, b backend.Backend) (TaskReplica, error)
}

// TaskReplica is one rank's part of a Task.
type TaskReplica interface {
	// Params are trained with the layers': their gradients are summed
	// over the ranks (as every rank's share of the loss is) and the
	// optimizer steps them.
	Params() []*nn.Param
	// Loss is rank's share of epoch's loss (0-based; the shares of all
	// ranks sum to the loss) from h, every node's output (rows x d,
	// row-major, engine IDs), with dropout applied in the layers. It
	// returns the share's gradient with respect to h (rows x d) and
	// sets its parameters' gradients to the share's.
	Loss(epoch int, h []float32, rows, d int) (loss float64, dh []float32, err error)
	// Evaluate runs on rank 0 after the epochs due with every node's
	// output without dropout, and returns a log summary.
	Evaluate(epoch int, h []float32, rows, d int) (string, error)
	// Free releases the replica's buffers.
	Free()
}

// allRows all-gathers the ranks' blocks of a layer output (local: this
// rank's rows x d, on the device) into every node's rows on the host.
func (w *worker) allRows(local backend.Buffer, d int) ([]float32, error) {
	mine := make([]float32, w.n*d)
	if err := w.b.Download(mine, local); err != nil {
		return nil, err
	}
	if w.p == 1 {
		return mine, nil
	}
	counts := make([]int, w.p)
	total := 0
	for r := range counts {
		counts[r] = w.lay.Size(r) * d
		total += counts[r]
	}
	all := make([]float32, total)
	if err := w.c.AllGatherV(w.ctx, cpu.WrapF32(all), cpu.WrapF32(mine), counts); err != nil {
		return nil, err
	}
	return all, nil
}

// taskGrad runs the task's loss on the final output out (this rank's
// rows) and returns the gradient of this rank's rows (a step buffer)
// and the loss, summed over the ranks in rank order.
func (w *worker) taskGrad(s *step, epoch int, out backend.Buffer) (backend.Buffer, float64, error) {
	d := w.classes
	h, err := w.allRows(out, d)
	if err != nil {
		return nil, 0, err
	}
	rows := len(h) / d
	share, dh, err := w.task.Loss(epoch, h, rows, d)
	if err != nil {
		return nil, 0, err
	}
	if len(dh) != rows*d {
		return nil, 0, fmt.Errorf("task gradient of %d values for %d x %d", len(dh), rows, d)
	}
	loss := share
	if w.p > 1 {
		// Every rank's gradient reaches every row: sum them (in rank
		// order on the host communicators) and keep this rank's rows.
		if err := w.c.AllReduce(w.ctx, cpu.WrapF32(dh), comm.Sum); err != nil {
			return nil, 0, err
		}
		all := make([]int64, w.p)
		if err := w.c.AllGather(w.ctx, cpu.WrapI64(all), cpu.WrapI64([]int64{int64(math.Float64bits(share))})); err != nil {
			return nil, 0, err
		}
		loss = 0
		for _, x := range all {
			loss += math.Float64frombits(uint64(x))
		}
	}
	g := s.f32(w.n * d)
	if !s.ok() {
		return nil, 0, s.err
	}
	if err := w.b.Upload(g, dh[w.lo*d:(w.lo+w.n)*d]); err != nil {
		return nil, 0, err
	}
	return g, loss, nil
}

// taskEvaluate embeds every node without dropout and lets rank 0's
// replica evaluate them (every rank takes part in the all-gather).
func (w *worker) taskEvaluate(epoch int) (string, error) {
	var h backend.Buffer
	defer func() { w.b.Free(h) }()
	for l := range w.specs {
		s := newStep(w.b)
		f := w.forward(s, l, h, false, 0, 1)
		if s.err != nil {
			s.release()
			return "", fmt.Errorf("evaluation layer %d: %w", l, s.err)
		}
		s.keep(f.out)
		s.release()
		w.b.Free(h)
		h = f.out
	}
	all, err := w.allRows(h, w.classes)
	if err != nil || w.rank != 0 {
		return "", err
	}
	return w.task.Evaluate(epoch, all, len(all)/w.classes, w.classes)
}
