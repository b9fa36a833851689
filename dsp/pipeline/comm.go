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

// gate is the discipline Comm and DeviceComm put around a collective.
type gate struct {
	launch Launcher
	stage  int
	name   string
	hook   Hook
	track  func(blocked string)
}

func (c *Comm) run(ctx context.Context, op comm.Op, fn func(context.Context) error) error {
	return gate{c.Launch, c.Stage, c.Name, c.Hook, c.Track}.run(ctx, c.Comm, op, fn)
}

// run calls the hook, waits for the stage's turn (with a launcher) and
// runs fn, the collective op of the communicator of rank r.
func (g gate) run(ctx context.Context, r interface{ Rank() int }, op comm.Op, fn func(context.Context) error) error {
	if g.hook != nil {
		g.hook(ctx, r.Rank(), "comm/"+g.name)
	}
	if g.launch == nil {
		g.set("in " + op.String())
		return g.done(fn(ctx))
	}
	g.set("waiting for its turn to launch " + op.String())
	return g.done(g.launch.Do(ctx, g.stage, func(ctx context.Context) error {
		g.set("in " + op.String())
		return fn(ctx)
	}))
}

func (g gate) set(blocked string) {
	if g.track != nil {
		g.track(blocked)
	}
}

// done clears the blocked state after a success; after a failure the last
// state stays, for the diagnosis.
func (g gate) done(err error) error {
	if err == nil {
		g.set("")
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

// DeviceComm is Comm for a device communicator: the same hook, launch
// order and blocked-state tracking around every collective (Sync and
// Close pass straight through).
type DeviceComm struct {
	comm.DeviceComm
	Launch Launcher
	Stage  int
	Name   string
	Hook   Hook
	Track  func(blocked string)
}

var _ comm.DeviceComm = (*DeviceComm)(nil)

func (c *DeviceComm) run(ctx context.Context, op comm.Op, fn func(context.Context) error) error {
	return gate{c.Launch, c.Stage, c.Name, c.Hook, c.Track}.run(ctx, c.DeviceComm, op, fn)
}

func (c *DeviceComm) AllReduce(ctx context.Context, buf backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpAllReduce, func(ctx context.Context) error { return c.DeviceComm.AllReduce(ctx, buf, op) })
}

func (c *DeviceComm) Broadcast(ctx context.Context, buf backend.Buffer, root int) error {
	return c.run(ctx, comm.OpBroadcast, func(ctx context.Context) error { return c.DeviceComm.Broadcast(ctx, buf, root) })
}

func (c *DeviceComm) AllGather(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllGather, func(ctx context.Context) error { return c.DeviceComm.AllGather(ctx, dst, src) })
}

func (c *DeviceComm) AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error {
	return c.run(ctx, comm.OpAllGatherV, func(ctx context.Context) error { return c.DeviceComm.AllGatherV(ctx, dst, src, counts) })
}

func (c *DeviceComm) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllToAll, func(ctx context.Context) error { return c.DeviceComm.AllToAll(ctx, dst, src) })
}

func (c *DeviceComm) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
	return c.run(ctx, comm.OpAllToAllV, func(ctx context.Context) error {
		return c.DeviceComm.AllToAllV(ctx, dst, recvCounts, src, sendCounts)
	})
}

func (c *DeviceComm) ReduceScatter(ctx context.Context, dst, src backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpReduceScatter, func(ctx context.Context) error { return c.DeviceComm.ReduceScatter(ctx, dst, src, op) })
}

func (c *DeviceComm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func(ctx context.Context) error { return c.DeviceComm.Barrier(ctx) })
}
