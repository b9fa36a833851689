package engine

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Task is a training objective other than node classification
// (Options.Task; nil trains a node classifier on the dataset's labels).
// The engine keeps everything else: partition, collective sampling,
// the feature cache, the pipeline, the gradient all-reduce and the
// replica check. A task deals the seeds of every batch and computes the
// step's loss from the encoder's output rows of those seeds, and device
// 0 evaluates it where node classification evaluates. Package link's
// task (link/multi) is link prediction: each device's batches are the
// training edges whose source it owns, the seeds their endpoints.
type Task interface {
	// OutDim is the encoder's output width.
	OutDim() int
	// Start is called once after partitioning, before any batch:
	// oldToNew maps the caller's node IDs to the engine's (nil when they
	// are unchanged) and b says which device owns each engine ID.
	Start(oldToNew []int32, b *book.Book) error
	// MaxBatches bounds the batches of one device in one epoch.
	MaxBatches() int
	// Batches deals epoch e's batches (0-based): batches[r][i] is
	// device r's batch i; every device has the same number, at least
	// one and at most MaxBatches. Device r's batch i is global batch
	// i*K+r (its sampling key and dropout seed).
	Batches(e int) ([][]TaskBatch, error)
	// Exclude, when the task needs it, edits a sampled batch (on the
	// host, engine IDs) before its features are loaded: link
	// prediction removes the batch's target edges. GPU batches are
	// downloaded for it.
	Exclude(mb *sample.MiniBatch, bt TaskBatch) error
	// Replica makes a device's own part of the task (its parameters) on
	// b; every replica starts equal.
	Replica(b backend.Backend) (TaskReplica, error)
	// Evaluate runs on device 0 after the epochs due (Common.EvalEvery
	// and the last) and returns a log summary.
	Evaluate(ev TaskEval, epoch int) (string, error)
}

// TaskPreparer is a Task whose batches are finished where they are
// sampled: Batches deals stand-ins (their Work only, Seeds may be nil),
// and the device's sampler stage calls Prepare on each just before
// sampling it, so that the per-batch host work (link prediction's
// negatives and seeds) runs batch by batch ahead of the trainer, on
// every device and sampler worker at once, not for a whole epoch at its
// start. Prepare returns the batch to sample, train and exclude with; it
// must depend only on its argument (the numbers then do not depend on
// which goroutine prepares) and must not modify it (Batches may hand
// the same stand-in out again).
type TaskPreparer interface {
	Prepare(bt TaskBatch) (TaskBatch, error)
}

// TaskWarmer is a Task whose step loss the engine's warm-up runs
// (its products met before any collective is in flight: docs/cuda.md,
// Pinned GEMM algorithms). WarmBatch returns a batch whose seeds are
// engine IDs 0..n-1, in order, that the replicas' Loss accepts with the
// model's output rows of those seeds; its numbers matter only in their
// shapes.
type TaskWarmer interface {
	WarmBatch(n int) TaskBatch
}

// TaskTargets is a Task whose Exclude removes the sampled edges that
// join the two nodes of given pairs (link prediction's target links),
// and says which: the engine then removes them itself where the batch
// was sampled, a GPU batch on its GPU (cudadsp.PairExcluder), so that
// the batch is neither downloaded nor uploaded again and travels on as
// node classification's do (features gathered by device IDs, transposes
// built by the loader, blocks aliased by the trainer). Host batches
// still go through Exclude, which must remove the same edges.
type TaskTargets interface {
	// Targets are bt's pairs (engine IDs) as keys u<<32 | v (uint32s),
	// both directions listed, sorted and distinct: a block edge from
	// source v into destination u is removed when u<<32 | v is a key.
	Targets(bt TaskBatch) []uint64
}

// TaskBatch is one batch of a Task: the seeds to sample (engine IDs,
// distinct) and what the task needs to compute its loss.
type TaskBatch struct {
	Seeds []graph.NodeID
	Work  any
}

// TaskReplica is one device's part of a Task.
type TaskReplica interface {
	// Params are trained with the encoder's: their gradients join the
	// all-reduce and the optimizer steps them.
	Params() []*nn.Param
	// Loss is the step's loss (a scalar on t) from h, the encoder's
	// output rows of bt's seeds, in their order; done (nil or a
	// function) frees what it uploaded, after the backward pass.
	Loss(t *autograd.Tape, h *autograd.Var, bt TaskBatch) (lv *autograd.Var, done func(), err error)
	// Free releases the replica's buffers.
	Free()
}

// TaskEval is what device 0 evaluates a Task with: its back end and
// replicas, the message-passing graph and the features, in engine IDs.
type TaskEval struct {
	B       backend.Backend
	Model   nn.Model
	Replica TaskReplica
	In      *graph.CSR
	Feats   *train.Features
}

// Deal is the engine's dealing of one epoch's items (node IDs, or a
// task's edge indices) in their order: each goes to its owner's share,
// devices above their share hand the excess to those below (in rank
// order), and each device's items are cut into batches of batchSize.
// Pad uses every item, in shares of T/K (+-1), repeating one item when
// a device is one batch short; Trim gives every device the same whole
// number of full batches and drops the rest. batches[r][i] is device
// r's batch i; every device has the same number.
func Deal(order []int32, owner func(int32) int, k, batchSize int, mode string) (batches [][][]int32, dropped int, err error) {
	t := len(order)
	if t == 0 {
		return nil, 0, fmt.Errorf("nothing to deal")
	}
	if k < 1 || batchSize < 1 {
		return nil, 0, fmt.Errorf("deal %d items to %d devices in batches of %d", t, k, batchSize)
	}
	own := make([][]int32, k)
	for _, v := range order {
		o := owner(v)
		if o < 0 || o >= k {
			return nil, 0, fmt.Errorf("item %d: owner %d not in [0, %d)", v, o, k)
		}
		own[o] = append(own[o], v)
	}
	share := make([]int, k)
	switch mode {
	case Trim:
		per := t / (k * batchSize) * batchSize
		if per == 0 {
			return nil, 0, fmt.Errorf("trim: %d items do not fill one batch of %d on each of %d devices (use pad)", t, batchSize, k)
		}
		for r := range share {
			share[r] = per
		}
	default:
		for r := range share {
			share[r] = t / k
			if r < t%k {
				share[r]++
			}
		}
	}
	var spare []int32
	for r := range own {
		if len(own[r]) > share[r] {
			spare = append(spare, own[r][share[r]:]...)
			own[r] = own[r][:share[r]:share[r]]
		}
	}
	for r := range own {
		if need := share[r] - len(own[r]); need > 0 {
			take := min(need, len(spare))
			own[r] = append(own[r], spare[:take]...)
			spare = spare[take:]
		}
	}
	batches = make([][][]int32, k)
	nb := (share[0] + batchSize - 1) / batchSize // share[0] is the largest
	for r, items := range own {
		for i := range nb {
			lo := min(i*batchSize, len(items))
			hi := min(lo+batchSize, len(items))
			bt := items[lo:hi:hi]
			if len(bt) == 0 {
				// Only the last batch of a device one item short of the
				// largest share: repeat an item so every device steps.
				if len(items) > 0 {
					bt = items[:1:1]
				} else {
					bt = order[r%t : r%t+1 : r%t+1]
				}
			}
			batches[r] = append(batches[r], bt)
		}
	}
	return batches, len(spare), nil
}
