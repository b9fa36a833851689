// Package direct performs a collective when every rank's buffers are
// addressable by every rank (goroutine ranks, or buffers inside a shared
// segment): each rank does its share by reading and writing the others'
// buffers directly, with no staging copies. The caller brackets Work with
// two barriers: after all calls are posted, and before anyone returns.
package direct

import (
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/reduce"
)

// block keeps a reduction's working set in cache while it is copied to
// every rank.
const block = 64 << 10

// Agree checks that all ranks posted the same operation, dtype and
// counts.
func Agree(calls []*comm.Call) error {
	a := calls[0]
	for r, b := range calls[1:] {
		r++
		if err := comm.PeerMismatch(comm.DescOf(a), comm.DescOf(b), 0, r); err != nil {
			return err
		}
		if b.Red != a.Red || b.Root != a.Root {
			return &comm.MismatchError{Seq: a.Seq, Diff: fmt.Sprintf("rank 0 issued %v #%d with %v and root %d, rank %d with %v and root %d", a.Op, a.Seq, a.Red, a.Root, r, b.Red, b.Root)}
		}
	}
	es := int64(a.ElemSize())
	for s, cs := range calls {
		for d, cd := range calls {
			switch a.Op {
			case comm.OpAllGather, comm.OpAllGatherV:
				if got, want := int64(len(cs.Send))/es, int64(cd.RecvCounts[s]); got != want {
					return comm.BlockMismatch(comm.DescOf(cd), d, s, got, want)
				}
			case comm.OpAllToAll, comm.OpAllToAllV:
				if cs.SendCounts[d] != cd.RecvCounts[s] {
					return comm.BlockMismatch(comm.DescOf(cd), d, s, int64(cs.SendCounts[d]), int64(cd.RecvCounts[s]))
				}
			}
		}
	}
	return nil
}

// Work does rank r's share of the collective on everyone's buffers.
// All-reduce: rank r owns elements [r*count/n, (r+1)*count/n), reduces
// them in rank order block by block and writes each block to every rank.
func Work(r int, calls []*comm.Call) {
	n := len(calls)
	c := calls[r]
	es := c.ElemSize()
	switch c.Op {
	case comm.OpAllReduce:
		count := len(c.Send) / es
		lo, hi := r*count/n*es, (r+1)*count/n*es
		blk := block / es * es
		for a := lo; a < hi; a += blk {
			b := min(a+blk, hi)
			// Rank 0's block is the accumulator: only rank r touches it.
			acc := calls[0].Recv[a:b]
			for j := 1; j < n; j++ {
				reduce.Into(c.DType, c.Red, acc, calls[j].Send[a:b])
			}
			reduce.Finish(c.DType, c.Red, acc, n)
			for j := 1; j < n; j++ {
				copy(calls[j].Recv[a:b], acc)
			}
		}
	case comm.OpBroadcast:
		if r != c.Root {
			copy(c.Recv, calls[c.Root].Send)
		}
	case comm.OpAllGather, comm.OpAllGatherV:
		for j := 0; j < n; j++ {
			copy(c.Recv[c.RecvDispls[j]*es:], calls[j].Send)
		}
	case comm.OpAllToAll, comm.OpAllToAllV:
		for j := 0; j < n; j++ {
			cj := calls[j]
			src := cj.Send[cj.SendDispls[r]*es : (cj.SendDispls[r]+cj.SendCounts[r])*es]
			copy(c.Recv[c.RecvDispls[j]*es:], src)
		}
	case comm.OpReduceScatter:
		lo, hi := c.SendDispls[r]*es, (c.SendDispls[r]+c.SendCounts[r])*es
		blk := block / es * es
		for a := lo; a < hi; a += blk {
			b := min(a+blk, hi)
			out := c.Recv[a-lo : b-lo]
			reduce.Into3(c.DType, c.Red, out, calls[0].Send[a:b], calls[1].Send[a:b])
			for j := 2; j < n; j++ {
				reduce.Into(c.DType, c.Red, out, calls[j].Send[a:b])
			}
			reduce.Finish(c.DType, c.Red, out, n)
		}
	case comm.OpBarrier:
	}
}
