package pipeline

import (
	"context"

	"github.com/strata-gnn/strata/comm"
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

// Comm wraps one stage's communicator: every collective first calls the
// hook, then waits for its turn in the launcher's order (when Launch is not
// nil) and runs.
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

func (c *Comm) track(s string) {
	if c.Track != nil {
		c.Track(s)
	}
}

func (c *Comm) run(ctx context.Context, op comm.Op, fn func(context.Context) error) error {
	if c.Hook != nil {
		c.Hook(ctx, c.Rank(), "comm/"+c.Name)
	}
	if c.Launch == nil {
		c.track("in " + op.String())
		return c.done(fn(ctx))
	}
	c.track("waiting for its turn to launch " + op.String())
	return c.done(c.Launch.Do(ctx, c.Stage, func(ctx context.Context) error {
		c.track("in " + op.String())
		return fn(ctx)
	}))
}

// done clears the blocked state after a success; after a failure the last
// state stays, for the diagnosis.
func (c *Comm) done(err error) error {
	if err == nil {
		c.track("")
	}
	return err
}

func (c *Comm) AllReduce(ctx context.Context, buf comm.Buf, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpAllReduce, func(ctx context.Context) error { return c.Comm.AllReduce(ctx, buf, op) })
}

func (c *Comm) Broadcast(ctx context.Context, buf comm.Buf, root int) error {
	return c.run(ctx, comm.OpBroadcast, func(ctx context.Context) error { return c.Comm.Broadcast(ctx, buf, root) })
}

func (c *Comm) AllGather(ctx context.Context, dst, src comm.Buf) error {
	return c.run(ctx, comm.OpAllGather, func(ctx context.Context) error { return c.Comm.AllGather(ctx, dst, src) })
}

func (c *Comm) AllGatherV(ctx context.Context, dst, src comm.Buf, counts []int) error {
	return c.run(ctx, comm.OpAllGatherV, func(ctx context.Context) error { return c.Comm.AllGatherV(ctx, dst, src, counts) })
}

func (c *Comm) AllToAll(ctx context.Context, dst, src comm.Buf) error {
	return c.run(ctx, comm.OpAllToAll, func(ctx context.Context) error { return c.Comm.AllToAll(ctx, dst, src) })
}

func (c *Comm) AllToAllV(ctx context.Context, dst comm.Buf, recvCounts []int, src comm.Buf, sendCounts []int) error {
	return c.run(ctx, comm.OpAllToAllV, func(ctx context.Context) error { return c.Comm.AllToAllV(ctx, dst, recvCounts, src, sendCounts) })
}

func (c *Comm) ReduceScatter(ctx context.Context, dst, src comm.Buf, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpReduceScatter, func(ctx context.Context) error { return c.Comm.ReduceScatter(ctx, dst, src, op) })
}

func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func(ctx context.Context) error { return c.Comm.Barrier(ctx) })
}
