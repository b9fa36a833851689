package inproc

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/direct"
)

// New returns the n communicators of one group, index = rank.
func New(n int, o comm.Options) ([]comm.Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("inproc: group size %d, want >= 1", n)
	}
	g := &group{n: n, calls: make([]*comm.Call, n), entered: make([]uint64, n), closed: make([]bool, n),
		gate: make(chan struct{}), abortCh: make(chan struct{})}
	cs := make([]comm.Comm, n)
	for r := range cs {
		cs[r] = comm.New(&rank{g: g, r: r}, o)
	}
	return cs, nil
}

type group struct {
	n int

	mu      sync.Mutex
	calls   []*comm.Call
	entered []uint64 // last sequence number each rank entered
	closed  []bool
	count   int           // arrivals at the current barrier
	gate    chan struct{} // closed when the current barrier completes
	abortCh chan struct{} // closed on abort
	abort   error
}

type rank struct {
	g *group
	r int
}

func (t *rank) Kind() string { return "inproc" }
func (t *rank) Rank() int    { return t.r }
func (t *rank) Size() int    { return t.g.n }
func (t *rank) Caps() comm.Caps {
	return comm.Caps{Overlap: true, RankOrderSum: true}
}

// barrier waits until all ranks arrive, the group is aborted, or ctx ends.
func (g *group) barrier(ctx context.Context) error {
	g.mu.Lock()
	if g.abort != nil {
		err := g.abort
		g.mu.Unlock()
		return err
	}
	ch := g.gate
	g.count++
	if g.count == g.n {
		g.count = 0
		close(g.gate)
		g.gate = make(chan struct{})
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-g.abortCh:
	case <-ctx.Done():
	}
	// Completion wins over an abort or deadline that raced with it (a peer
	// may close right after the last barrier of its final operation).
	select {
	case <-ch:
		return nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.abort
}

func (g *group) setAbort(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abort == nil {
		g.abort = err
		close(g.abortCh)
	}
}

func (t *rank) Run(ctx context.Context, c *comm.Call) error {
	err := t.run(ctx, c)
	if err != nil {
		t.g.mu.Lock()
		closed := t.g.closed[t.r]
		t.g.mu.Unlock()
		if closed {
			return comm.ErrClosed
		}
	}
	return err
}

func (t *rank) run(ctx context.Context, c *comm.Call) error {
	g := t.g
	g.mu.Lock()
	g.calls[t.r] = c
	g.entered[t.r] = c.Seq
	g.mu.Unlock()
	if err := g.barrier(ctx); err != nil {
		return err
	}
	// Everyone has posted: check they agree (cheap here), then work.
	calls := make([]*comm.Call, g.n)
	g.mu.Lock()
	copy(calls, g.calls)
	g.mu.Unlock()
	if err := direct.Agree(calls); err != nil {
		return err
	}
	direct.Work(t.r, calls)
	return g.barrier(ctx)
}

func (t *rank) Missing(ctx context.Context, seq uint64) []int {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	var m []int
	for r := 0; r < g.n; r++ {
		if g.entered[r] < seq || g.closed[r] {
			m = append(m, r)
		}
	}
	return m
}

func (t *rank) Abort(err *comm.OpError) {
	t.g.setAbort(&comm.AbortError{By: t.r, Seq: err.Seq, Missing: err.Missing, Reason: err.Error()})
}

func (t *rank) Close() error {
	g := t.g
	g.mu.Lock()
	if g.closed[t.r] {
		g.mu.Unlock()
		return nil
	}
	g.closed[t.r] = true
	g.mu.Unlock()
	// Peers waiting on this rank would otherwise wait for their deadline.
	g.setAbort(&comm.PeerError{Ranks: []int{t.r}, Err: comm.ErrPeerLost, Msg: fmt.Sprintf("rank %d closed its communicator", t.r)})
	return nil
}
