package gpucsp

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// Walker is one rank's collective random-walk sampler on a GPU: the walks
// of csp.Walker and sample.RandomWalk (uniform steps along the patch's
// in-adjacency rows) with the walkers, their steps and the walks in
// device memory. Its methods serialize; Walk is a collective.
type Walker struct {
	member
	length int

	gm *gpuWalkMachine
	p  *wproto
}

// NewWalker prepares rank c.Rank()'s walker taking length steps (0 to
// 2^16) per walk, with the patch, offsets and communicator of New; the
// patch's rows are copied to dev (placement as Config.Placement:
// OnDevice, or Mapped and Split, which keep the column indices in host
// memory).
func NewWalker(dev *cuda.Device, patch *layout.Patch, offsets []int64, c comm.DeviceComm, length int, placement gpusample.Placement) (*Walker, error) {
	const op = "gpucsp.NewWalker"
	rank, size := groupOf(c)
	bad := func(format string, args ...any) (*Walker, error) {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	b, msg := checkGroup(patch, offsets, rank, size)
	if msg != "" {
		return bad("%s", msg)
	}
	if err := checkWalkLength(length); err != nil {
		return bad("%v", err)
	}
	if placement != gpusample.OnDevice && placement != gpusample.Mapped && placement != gpusample.Split {
		return bad("unknown placement %d", placement)
	}
	if dev == nil {
		return bad("nil device")
	}
	w := &Walker{member: member{dev: dev, rank: rank, size: size}, length: length}
	p := newProto(dev, c, b, rank, &w.stats, max(length, 1))
	var err error
	if w.gm, err = newGPUWalkMachine(dev, patch, p.off, size, length, placement); err != nil {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Err: err}
	}
	p.m = w.gm
	w.p = &wproto{proto: p, wm: w.gm, length: length}
	fail := func(err error) (*Walker, error) {
		w.Close()
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Err: err}
	}
	if p.ctl, err = w.gm.alloc(backend.Int64, ctlLayout{size}.words()); err != nil {
		return fail(err)
	}
	if w.p.bad, err = w.gm.alloc(backend.Int64, 1); err != nil {
		return fail(err)
	}
	return w, nil
}

// Length is the number of steps per walk.
func (w *Walker) Length() int { return w.length }

// Close releases the walker's device memory (not the communicator, nor
// walks already returned).
func (w *Walker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.p != nil {
		for _, b := range []backend.Buffer{w.p.ctl, w.p.bad} {
			if b != nil {
				w.dev.Free(b)
			}
		}
	}
	if w.gm != nil {
		return w.gm.close()
	}
	return nil
}

// Walk draws one walk of Length steps from every start (global IDs,
// repeats allowed) with key. It is a collective: every rank calls it the
// same number of times, in the same order (start counts may differ,
// including 0). The walks live on this rank's device and equal
// sample.RandomWalk's over the whole in-adjacency with the same starts,
// length and key. Errors are *Error with Op "gpucsp.Walk" and Hop the
// step (Length: the traces' return).
func (w *Walker) Walk(ctx context.Context, starts []graph.NodeID, key sample.Key) (*Walks, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, &Error{Rank: w.rank, Op: "gpucsp.Walk", Hop: -1, Msg: "walker is closed", Err: ErrInput}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	out, err := w.p.walk(ctx, starts, key)
	if err != nil {
		var ge *Error
		if errors.As(err, &ge) {
			ge.Op = "gpucsp.Walk"
		}
		return nil, err
	}
	n := len(starts) * (w.length + 1)
	b := out.(*cuda.Buffer)
	if err := b.Truncate(n); err != nil {
		w.dev.Free(b)
		return nil, &Error{Rank: w.rank, Op: "gpucsp.Walk", Hop: w.length, Err: err}
	}
	return &Walks{dev: w.dev, Length: w.length, Nodes: b}, nil
}

// Walks are walks in device memory: walk i is Nodes[i*(Length+1) :
// (i+1)*(Length+1)] (int32), its start first, -1 after a dead end (as
// sample.Walks).
type Walks struct {
	dev    *cuda.Device
	Length int
	Nodes  *cuda.Buffer
}

// Download copies the walks to the host.
func (w *Walks) Download() (*sample.Walks, error) {
	out := &sample.Walks{Length: w.Length, Nodes: make([]graph.NodeID, w.Nodes.Len())}
	if err := w.dev.Download(out.Nodes, w.Nodes); err != nil {
		return nil, err
	}
	return out, nil
}

// Free releases the walks' memory.
func (w *Walks) Free() {
	if w.Nodes != nil {
		w.dev.Free(w.Nodes)
		w.Nodes = nil
	}
}
