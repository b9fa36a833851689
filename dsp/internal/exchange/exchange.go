// Package exchange wraps the all-to-all collectives DSP's stages use with
// the bookkeeping they share: receive counts from send counts, packing in
// rank order, and counting the bytes sent on each link.
package exchange

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/metrics"
)

// Exchanger is one rank's all-to-all helper over C. Not safe for
// concurrent use (neither is a Comm's collective order).
type Exchanger struct {
	C       comm.Comm
	M       *metrics.Counters // nil: no accounting
	Purpose metrics.Purpose
}

// Link classifies the path from this rank to peer: itself (local), a
// process on another host (network, for communicators that span hosts) or
// a device of the same host (peer).
func (x *Exchanger) Link(peer int) metrics.Link {
	switch {
	case peer == x.C.Rank():
		return metrics.Local
	case x.C.Kind() == "tcp":
		return metrics.Network
	}
	return metrics.Peer
}

func (x *Exchanger) count(counts []int, elem int) {
	if x.M == nil {
		return
	}
	for p, n := range counts {
		x.M.AddBytes(x.Purpose, x.Link(p), int64(n*elem))
	}
}

// Fixed sends send[p*w:(p+1)*w] to every rank p and returns what each
// rank sent here, in the same layout (AllToAll).
func (x *Exchanger) Fixed(ctx context.Context, send []int64, w int) ([]int64, error) {
	n := x.C.Size()
	if len(send) != n*w {
		return nil, fmt.Errorf("exchange: %d values for %d ranks x %d", len(send), n, w)
	}
	recv := make([]int64, len(send))
	counts := make([]int, n)
	for p := range counts {
		counts[p] = w
	}
	x.count(counts, 8)
	if err := x.C.AllToAll(ctx, comm.I64(recv), comm.I64(send)); err != nil {
		return nil, err
	}
	return recv, nil
}

// Counts exchanges per-peer element counts: it returns recvCounts, where
// recvCounts[p] is what rank p will send here.
func (x *Exchanger) Counts(ctx context.Context, sendCounts []int) ([]int, error) {
	send := make([]int64, len(sendCounts))
	for p, c := range sendCounts {
		send[p] = int64(c)
	}
	recv, err := x.Fixed(ctx, send, 1)
	if err != nil {
		return nil, err
	}
	return ToInts(recv)
}

// MaxElems bounds what one exchange may receive in all (elements), so a
// corrupt count fails before anything is allocated.
const MaxElems = 1 << 32

// ToInts converts received counts, rejecting negative ones and totals
// above MaxElems.
func ToInts(v []int64) ([]int, error) {
	out := make([]int, len(v))
	var total int64
	for i, c := range v {
		if c < 0 || c > math.MaxInt32 {
			return nil, fmt.Errorf("exchange: rank %d announced %d elements", i, c)
		}
		if total += c; total > MaxElems {
			return nil, fmt.Errorf("exchange: peers announced more than %d elements", int64(MaxElems))
		}
		out[i] = int(c)
	}
	return out, nil
}

// alloc checks the total of recvCounts before allocating it.
func alloc[T any](recvCounts []int) ([]T, error) {
	total := 0
	for _, c := range recvCounts {
		if c < 0 || total > MaxElems-c {
			return nil, fmt.Errorf("exchange: receive counts %v exceed %d elements", recvCounts, int64(MaxElems))
		}
		total += c
	}
	return make([]T, total), nil
}

// Sum adds counts.
func Sum(c []int) int {
	s := 0
	for _, x := range c {
		s += x
	}
	return s
}

// I32 sends sendCounts[p] int32 elements (packed in rank order) to every
// rank p and receives recvCounts[p] from each.
func (x *Exchanger) I32(ctx context.Context, send []int32, sendCounts, recvCounts []int) ([]int32, error) {
	recv, err := alloc[int32](recvCounts)
	if err != nil {
		return nil, err
	}
	x.count(sendCounts, 4)
	if err := x.C.AllToAllV(ctx, comm.I32(recv), recvCounts, comm.I32(send), sendCounts); err != nil {
		return nil, err
	}
	return recv, nil
}

// I64 is I32 for int64 elements.
func (x *Exchanger) I64(ctx context.Context, send []int64, sendCounts, recvCounts []int) ([]int64, error) {
	recv, err := alloc[int64](recvCounts)
	if err != nil {
		return nil, err
	}
	x.count(sendCounts, 8)
	if err := x.C.AllToAllV(ctx, comm.I64(recv), recvCounts, comm.I64(send), sendCounts); err != nil {
		return nil, err
	}
	return recv, nil
}

// F32 is I32 for float32 elements.
func (x *Exchanger) F32(ctx context.Context, send []float32, sendCounts, recvCounts []int) ([]float32, error) {
	recv, err := alloc[float32](recvCounts)
	if err != nil {
		return nil, err
	}
	x.count(sendCounts, 4)
	if err := x.C.AllToAllV(ctx, comm.F32(recv), recvCounts, comm.F32(send), sendCounts); err != nil {
		return nil, err
	}
	return recv, nil
}

// Scale multiplies counts by k (e.g. rows to floats).
func Scale(c []int, k int) []int {
	out := make([]int, len(c))
	for i, x := range c {
		out[i] = x * k
	}
	return out
}

// Offsets returns the exclusive prefix sums of c (len(c)+1 entries).
func Offsets(c []int) []int {
	out := make([]int, len(c)+1)
	for i, x := range c {
		out[i+1] = out[i] + x
	}
	return out
}
