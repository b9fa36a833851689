package csp

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
)

// Walker is one rank's collective random-walk sampler: the walks of
// sample.RandomWalk (uniform steps along the patch's
// in-adjacency rows) with the walkers, their steps and the walks on the
// rank's back end. Its methods serialize; Walk is a collective.
type Walker struct {
	member
	length int

	p *wproto
}

// NewWalker prepares rank c.Rank()'s walker taking length steps (0 to
// 2^16) per walk, with the patch, offsets and communicator of New; on a
// CUDA device the patch's rows are copied there (placement as
// Config.Placement: OnDevice, or Mapped and Split, which keep the column
// indices in host memory), the CPU back end reads them in place.
func NewWalker(be backend.Backend, patch *layout.Patch, offsets []int64, c comm.Comm, length int, placement gpusample.Placement) (*Walker, error) {
	o, err := open("csp.NewWalker", be, patch, offsets, c, func() error {
		if err := checkWalkLength(length); err != nil {
			return err
		}
		if placement != gpusample.OnDevice && placement != gpusample.Mapped && placement != gpusample.Split {
			return fmt.Errorf("unknown placement %d", placement)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	w := &Walker{length: length}
	p := o.proto(&w.member, max(length, 1))
	var wm WalkMachine
	if o.host != nil {
		wm = newCPUWalkMachine(o.host, patch, p.off, o.size, length)
	} else if wm, err = device.Walker(be, patch, p.off, o.size, length, placement); err != nil {
		return nil, o.fail(err)
	}
	w.p = &wproto{proto: p, wm: wm, length: length}
	if err = p.setMachine(wm); err == nil {
		w.p.bad, err = wm.Alloc(backend.Int64, 1)
	}
	if err != nil {
		w.Close()
		return nil, o.fail(err)
	}
	return w, nil
}

// Length is the number of steps per walk.
func (w *Walker) Length() int { return w.length }

// Close releases the walker's memory (not the communicator, nor walks
// already returned).
func (w *Walker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.p != nil {
		return w.p.close(w.p.bad)
	}
	return nil
}

// Walk draws one walk of Length steps from every start (global IDs,
// repeats allowed) with key. It is a collective: every rank calls it the
// same number of times, in the same order (start counts may differ,
// including 0). The walks live on this rank's back end and equal
// sample.RandomWalk's over the whole in-adjacency with the same starts,
// length and key. Errors are *Error with Op "csp.Walk" and Hop the
// step (Length: the traces' return).
func (w *Walker) Walk(ctx context.Context, starts []graph.NodeID, key sample.Key) (*Walks, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, &Error{Rank: w.rank, Op: "csp.Walk", Hop: -1, Msg: "walker is closed", Err: ErrInput}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	out, err := w.p.walk(ctx, starts, key)
	if err != nil {
		var ge *Error
		if errors.As(err, &ge) {
			ge.Op = "csp.Walk"
		}
		return nil, err
	}
	b, err := w.p.m.Shrink(out, int64(len(starts)*(w.length+1)))
	if err != nil {
		w.p.m.Free(out)
		return nil, &Error{Rank: w.rank, Op: "csp.Walk", Hop: w.length, Err: err}
	}
	return &Walks{be: w.be, Length: w.length, Nodes: b}, nil
}

// Walks are walks on a back end: walk i is Nodes[i*(Length+1) :
// (i+1)*(Length+1)] (int32), its start first, -1 after a dead end (as
// sample.Walks).
type Walks struct {
	be     backend.Backend
	Length int
	Nodes  backend.Buffer
}

// Download copies the walks to the host.
func (w *Walks) Download() (*sample.Walks, error) {
	out := &sample.Walks{Length: w.Length, Nodes: make([]graph.NodeID, w.Nodes.Len())}
	if err := w.be.Download(out.Nodes, w.Nodes); err != nil {
		return nil, err
	}
	return out, nil
}

// Free releases the walks' memory.
func (w *Walks) Free() {
	if w.Nodes != nil {
		w.be.Free(w.Nodes)
		w.Nodes = nil
	}
}
