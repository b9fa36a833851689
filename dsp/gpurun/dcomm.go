package gpurun

import (
	"context"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/tensor/backend"
)

// coordComm is pipeline.Comm for device communicators: every collective
// first calls the hook, then waits for the stage's turn in the launcher's
// global order, then runs (and, on NCCL, waits for completion, so the
// next collective of any stage starts after it on every device).
type coordComm struct {
	comm.DeviceComm
	launch pipeline.Launcher // nil: no coordination
	stage  int
	name   string
	hook   pipeline.Hook
	trk    *tracker
}

var _ comm.DeviceComm = (*coordComm)(nil)

func (c *coordComm) run(ctx context.Context, op comm.Op, fn func(context.Context) error) error {
	if c.hook != nil {
		c.hook(ctx, c.Rank(), "comm/"+c.name)
	}
	if c.launch == nil {
		c.trk.blocked(c.stage, "in "+op.String())
		return c.done(fn(ctx))
	}
	c.trk.blocked(c.stage, "waiting for its turn to launch "+op.String())
	return c.done(c.launch.Do(ctx, c.stage, func(ctx context.Context) error {
		c.trk.blocked(c.stage, "in "+op.String())
		return fn(ctx)
	}))
}

// done clears the blocked state after a success (a failure keeps it for
// the diagnosis).
func (c *coordComm) done(err error) error {
	if err == nil {
		c.trk.blocked(c.stage, "")
	}
	return err
}

func (c *coordComm) AllReduce(ctx context.Context, buf backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpAllReduce, func(ctx context.Context) error { return c.DeviceComm.AllReduce(ctx, buf, op) })
}

func (c *coordComm) Broadcast(ctx context.Context, buf backend.Buffer, root int) error {
	return c.run(ctx, comm.OpBroadcast, func(ctx context.Context) error { return c.DeviceComm.Broadcast(ctx, buf, root) })
}

func (c *coordComm) AllGather(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllGather, func(ctx context.Context) error { return c.DeviceComm.AllGather(ctx, dst, src) })
}

func (c *coordComm) AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error {
	return c.run(ctx, comm.OpAllGatherV, func(ctx context.Context) error { return c.DeviceComm.AllGatherV(ctx, dst, src, counts) })
}

func (c *coordComm) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	return c.run(ctx, comm.OpAllToAll, func(ctx context.Context) error { return c.DeviceComm.AllToAll(ctx, dst, src) })
}

func (c *coordComm) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
	return c.run(ctx, comm.OpAllToAllV, func(ctx context.Context) error {
		return c.DeviceComm.AllToAllV(ctx, dst, recvCounts, src, sendCounts)
	})
}

func (c *coordComm) ReduceScatter(ctx context.Context, dst, src backend.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.OpReduceScatter, func(ctx context.Context) error { return c.DeviceComm.ReduceScatter(ctx, dst, src, op) })
}

func (c *coordComm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func(ctx context.Context) error { return c.DeviceComm.Barrier(ctx) })
}
