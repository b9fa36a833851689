package train

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/strata-gnn/strata/internal/progress"
)

// Task is one kind of sampled training that a Loop drives: node
// classification on a homogeneous or a typed dataset (Run, RunHetero),
// link prediction on a typed one (package link). The loop owns the
// epochs, the batches, the progress bar, cancellation, checkpoints and
// the log; the task owns its batches' order, its steps and its
// evaluation.
type Task interface {
	// BeginEpoch prepares epoch's order of training items (0-based).
	BeginEpoch(epoch int) error
	// Step runs one optimizer step on batch of the current epoch and
	// returns its loss.
	Step(epoch, batch int) (float64, error)
	// EndEpoch evaluates the epoch when it is due and records it, given
	// the epoch's batch losses and a clock of its seconds so far
	// (resumed parts included); line is the epoch's log line. Its error
	// is returned as it is.
	EndEpoch(epoch int, losses []float64, seconds func() float64) (line string, err error)
}

// PartialEpoch is the part of the current epoch already run.
type PartialEpoch struct {
	BatchLosses []float64 `json:"batch_losses"`
	Seconds     float64   `json:"seconds"`
}

// Loop runs Epochs epochs of Batches batches of a Task, from Cursor on
// (with Partial, the losses and seconds of a resumed epoch's batches
// already run), showing a progress bar and logging about 25 epoch lines
// (LogEvery). Save, when set, is called every CheckpointEvery batches
// (counted from the start of training), when the context is cancelled and
// at the end, with Cursor and Partial at the position reached.
type Loop struct {
	Epochs, Batches int
	Cursor          Cursor
	Partial         PartialEpoch
	CheckpointEvery int
	Save            func() error
	// OnBatch, when set, is called after every step with its position
	// and loss.
	OnBatch func(epoch, batch int, loss float64)
	// Log receives the epoch lines; nil for none.
	Log io.Writer
	// NoBar shows no progress bar (the replicas of a multi-device run
	// but the first).
	NoBar bool
}

// Run runs the epochs from the cursor to Epochs. A cancelled ctx stops
// it between batches (after Save) with a *RunError wrapping
// ErrInterrupted; a step's error comes back as a *RunError naming the
// epoch and batch.
func (l *Loop) Run(ctx context.Context, task Task) error {
	every := LogEvery(l.Epochs)
	var bar *progress.Bar
	barEnd := -1 // last epoch (0-based) of the current bar's chunk
	for e := l.Cursor.Epoch; e < l.Epochs; e++ {
		if e > barEnd {
			barEnd = min(l.Epochs-1, (e/every+1)*every-1)
			units := int64(barEnd-e+1) * int64(l.Batches)
			if !l.NoBar {
				bar = progress.New(units, fmt.Sprintf("epoch %d/%d", e+1, l.Epochs))
			}
		}
		epochStart := time.Now()
		if err := task.BeginEpoch(e); err != nil {
			bar.Finish()
			return &RunError{Op: fmt.Sprintf("epoch %d", e+1), Err: err}
		}
		for bi := l.Cursor.Batch; bi < l.Batches; bi++ {
			op := func() string { return fmt.Sprintf("epoch %d batch %d", e+1, bi) }
			if err := ctx.Err(); err != nil {
				l.Partial.Seconds += time.Since(epochStart).Seconds()
				bar.Finish()
				if l.Save != nil {
					if serr := l.Save(); serr != nil {
						return serr
					}
				}
				return &RunError{Op: op(), Err: fmt.Errorf("%w: %v", ErrInterrupted, err)}
			}
			loss, err := task.Step(e, bi)
			if err != nil {
				bar.Finish()
				return &RunError{Op: op(), Err: err}
			}
			l.Partial.BatchLosses = append(l.Partial.BatchLosses, loss)
			l.Cursor.Batch = bi + 1
			bar.Add(1)
			bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f", e+1, l.Epochs, loss))
			if l.OnBatch != nil {
				l.OnBatch(e, bi, loss)
			}
			if n := l.CheckpointEvery; n > 0 && l.Save != nil && (e*l.Batches+bi+1)%n == 0 {
				elapsed := time.Since(epochStart).Seconds()
				l.Partial.Seconds += elapsed
				err := l.Save()
				l.Partial.Seconds -= elapsed
				if err != nil {
					return err
				}
			}
		}
		line, err := task.EndEpoch(e, l.Partial.BatchLosses, func() float64 {
			return l.Partial.Seconds + time.Since(epochStart).Seconds()
		})
		if err != nil {
			bar.Finish()
			return err
		}
		l.Cursor = Cursor{Epoch: e + 1}
		l.Partial = PartialEpoch{}
		if e == barEnd {
			bar.Finish()
		}
		if (e == barEnd || e == 0) && l.Log != nil {
			fmt.Fprintf(l.Log, "%s\n", line)
		}
	}
	if l.Save != nil {
		return l.Save()
	}
	return nil
}
