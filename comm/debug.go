package comm

import (
	"context"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Descriptor fields exchanged by the debug check.
const (
	dOp = iota
	dDType
	dRed
	dRoot
	dSend // elements sent (AllReduce, Broadcast: buffer length)
	dRecv // elements received
	dFixed
)

// descriptor is what the debug check exchanges about call c in a group
// of n.
func descriptor(c *DeviceCall, n int) []int64 {
	d := make([]int64, dFixed+2*n)
	d[dOp], d[dDType], d[dRed], d[dRoot] = int64(c.Op), int64(c.DType), int64(c.Red), int64(c.Root)
	if c.Send != nil {
		d[dSend] = int64(c.Send.Len())
	}
	if c.Recv != nil {
		d[dRecv] = int64(c.Recv.Len())
	}
	if c.Op == OpAllToAllV {
		for r := 0; r < n; r++ {
			d[dFixed+r] = int64(c.SendCounts[r])
		}
	}
	if c.Op == OpAllGatherV || c.Op == OpAllToAllV {
		for r := 0; r < n; r++ {
			d[dFixed+n+r] = int64(c.RecvCounts[r])
		}
	}
	return d
}

func describe(d []int64, n int) string {
	op := Op(d[dOp])
	dt := backend.DType(d[dDType])
	switch op {
	case OpAllReduce:
		return fmt.Sprintf("%v(%v, %d, %v)", op, dt, d[dSend], ReduceOp(d[dRed]))
	case OpBroadcast:
		return fmt.Sprintf("%v(%v, %d, root %d)", op, dt, d[dSend], d[dRoot])
	case OpAllGather, OpAllToAll:
		return fmt.Sprintf("%v(%v, send %d)", op, dt, d[dSend])
	case OpAllGatherV:
		return fmt.Sprintf("%v(%v, send %d, counts %v)", op, dt, d[dSend], d[dFixed+n:dFixed+2*n])
	case OpAllToAllV:
		return fmt.Sprintf("%v(%v, sendCounts %v, recvCounts %v)", op, dt, d[dFixed:dFixed+n], d[dFixed+n:dFixed+2*n])
	case OpReduceScatter:
		return fmt.Sprintf("%v(%v, recv %d, %v)", op, dt, d[dRecv], ReduceOp(d[dRed]))
	case OpBarrier:
		return "barrier"
	}
	return op.String()
}

// debugCheck exchanges descriptors of the pending call and returns a
// *MismatchError if the ranks disagree: through a host transport as an
// all-gather with the call's sequence number (PhaseDebug), through a
// device transport's Gather.
func (c *front) debugCheck(ctx context.Context, call *DeviceCall) error {
	n := c.size
	mine := descriptor(call, n)
	return c.checkDescriptors(call.Seq, mine, func(all []int64) error {
		if c.host != nil {
			cs, ds := equalCounts(n, len(mine))
			dc := &Call{Op: OpAllGather, Phase: PhaseDebug, Seq: call.Seq, DType: backend.Int64, Deadline: call.Deadline,
				Send: bytesOf(mine), Recv: bytesOf(all), RecvCounts: cs, RecvDispls: ds}
			return c.host.Run(ctx, dc)
		}
		got, err := c.dev.Gather(ctx, call.Seq, mine)
		if err != nil {
			return err
		}
		if len(got) != len(all) {
			return fmt.Errorf("%w: debug exchange returned %d words, want %d", ErrProtocol, len(got), len(all))
		}
		copy(all, got)
		return nil
	})
}

// compareDescs returns the first disagreement, or "".
func compareDescs(d [][]int64, n int) string {
	a := d[0]
	for r := 1; r < n; r++ {
		b := d[r]
		if b[dOp] != a[dOp] {
			return fmt.Sprintf("rank 0 issued %v but rank %d issued %v", Op(a[dOp]), r, Op(b[dOp]))
		}
		if b[dDType] != a[dDType] {
			return fmt.Sprintf("rank 0 used %v but rank %d used %v", backend.DType(a[dDType]), r, backend.DType(b[dDType]))
		}
	}
	field := func(i int, what string) string {
		for r := 1; r < n; r++ {
			if d[r][i] != a[i] {
				return fmt.Sprintf("%s differs: rank 0 has %d, rank %d has %d", what, a[i], r, d[r][i])
			}
		}
		return ""
	}
	switch Op(a[dOp]) {
	case OpAllReduce:
		if s := field(dRed, "reduction"); s != "" {
			return s
		}
		return field(dSend, "element count")
	case OpBroadcast:
		if s := field(dRoot, "root"); s != "" {
			return s
		}
		return field(dSend, "element count")
	case OpAllGather, OpAllToAll:
		return field(dSend, "element count")
	case OpReduceScatter:
		if s := field(dRed, "reduction"); s != "" {
			return s
		}
		return field(dRecv, "block size")
	case OpAllGatherV:
		counts := a[dFixed+n : dFixed+2*n]
		for r := 0; r < n; r++ {
			if !slices.Equal(d[r][dFixed+n:dFixed+2*n], counts) {
				return fmt.Sprintf("counts differ: rank 0 has %v, rank %d has %v", counts, r, d[r][dFixed+n:dFixed+2*n])
			}
			if d[r][dSend] != counts[r] {
				return fmt.Sprintf("rank %d sends %d elements but counts[%d] = %d", r, d[r][dSend], r, counts[r])
			}
		}
	case OpAllToAllV:
		for s := 0; s < n; s++ {
			for t := 0; t < n; t++ {
				if sent, recv := d[s][dFixed+t], d[t][dFixed+n+s]; sent != recv {
					return fmt.Sprintf("rank %d sends %d elements to rank %d, which expects %d", s, sent, t, recv)
				}
			}
		}
	}
	return ""
}
