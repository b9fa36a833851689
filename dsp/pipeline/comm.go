package pipeline

import (
	"context"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Launcher serializes a device's collectives in one global launch order:
// Do runs fn (which issues one collective) when it is stage's turn.
// comm.Coordinator is the implementation (DSP's centralized
// communication coordination: the leader's arrival order, broadcast on a
// control communicator).
type Launcher interface {
	Do(ctx context.Context, stage int, fn func(ctx context.Context) error) error
}

var _ Launcher = (*comm.Coordinator)(nil)

// Comm wraps one stage's communicator (of host or device buffers alike):
// every collective first calls the hook, then waits for its turn in the
// launcher's order (when Launch is not nil) and runs. Sync, Alloc, Free,
// History and Close pass straight through.
//
// Track, when set, is told what the stage is blocked on: "waiting for
// its turn to launch <op>", "in <op>", and "" once the collective has
// returned successfully (for diagnosing stalls; after a failure the last
// state stays).
type Comm struct {
	comm.Comm
	Launch Launcher
	Stage  int
	Name   string
	Hook   Hook
	Track  func(blocked string)
}

var _ comm.Comm = (*Comm)(nil)

// run calls the hook, waits for the stage's turn (with a launcher) and
// runs fn, the collective op.
func (c *Comm) run(ctx context.Context, op comm.Op, fn func(context.Context) error) error {
	if c.Hook != nil {
		c.Hook(ctx, c.Rank(), "comm/"+c.Name)
	}
	if c.Launch == nil {
		c.set("in " + op.String())
		return c.done(fn(ctx))
	}
	c.set("waiting for its turn to launch " + op.String())
	return c.done(c.Launch.Do(ctx, c.Stage, func(ctx context.Context) error {
		c.set("in " + op.String())
		return fn(ctx)
	}))
}

func (c *Comm) set(blocked string) {
	if c.Track != nil {
		c.Track(blocked)
	}
}

// done clears the blocked state after a success; after a failure the last
// state stays, for the diagnosis.
func (c *Comm) done(err error) error {
	if err == nil {
		c.set("")
	}
	return err
}

func (c *Comm) AllReduce(ctx context.Context, buf backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpAllReduce, func(ctx context.Context) error { return c.Comm.AllReduce(ctx, buf, op) })
}

func (c *Comm) Broadcast(ctx context.Context, buf backend.Buffer, root int) error {
	return c.run(ctx, comm.OpBroadcast, func(ctx context.Context) error { return c.Comm.Broadcast(ctx, buf, root) })
}

func (c *Comm) AllGather(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllGather, func(ctx context.Context) error { return c.Comm.AllGather(ctx, dst, src) })
}

func (c *Comm) AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error {
	return c.run(ctx, comm.OpAllGatherV, func(ctx context.Context) error { return c.Comm.AllGatherV(ctx, dst, src, counts) })
}

func (c *Comm) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllToAll, func(ctx context.Context) error { return c.Comm.AllToAll(ctx, dst, src) })
}

func (c *Comm) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
	return c.run(ctx, comm.OpAllToAllV, func(ctx context.Context) error {
		return c.Comm.AllToAllV(ctx, dst, recvCounts, src, sendCounts)
	})
}

func (c *Comm) ReduceScatter(ctx context.Context, dst, src backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpReduceScatter, func(ctx context.Context) error { return c.Comm.ReduceScatter(ctx, dst, src, op) })
}

func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func(ctx context.Context) error { return c.Comm.Barrier(ctx) })
}
