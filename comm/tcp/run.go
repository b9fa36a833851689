package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/reduce"
	"github.com/strata-gnn/strata/tensor/backend"
)

// sendU and recvU are the units of a collective's schedule: one frame
// each. Sends run in order on a goroutine; send i first waits until
// `after` receives have completed. Receives run in order on the caller.
type sendU struct {
	peer  int
	data  []byte
	after int
}

type recvU struct {
	peer   int
	dst    []byte
	base   []byte // reduce: dst = base op incoming (nil: dst op incoming)
	reduce bool
	finish bool // apply Mean's division after reducing
}

// sched builds a schedule.
type sched struct {
	sends []sendU
	recvs []recvU
}

func mod(a, n int) int { return ((a % n) + n) % n }

// segs returns the number of segments for blocks of at most maxElems
// elements, and the elements per segment.
func (t *transport) segs(maxElems, es int) (int, int) {
	per := t.seg / es
	s := (maxElems + per - 1) / per
	return max(1, s), per
}

// part returns segment j of elements [lo, hi) of buf as bytes.
func part(buf []byte, es, lo, hi, j, per int) []byte {
	a := min(lo+j*per, hi)
	b := min(a+per, hi)
	return buf[a*es : b*es]
}

func (t *transport) Run(ctx context.Context, c *comm.Call) error {
	if err := t.abortErr(); err != nil {
		return t.failure(ctx, err)
	}
	t.entered.Store(c.Seq)
	var s sched
	switch c.Op {
	case comm.OpAllReduce:
		s = t.allReduce(c)
	case comm.OpReduceScatter:
		s = t.reduceScatter(c)
	case comm.OpAllGather, comm.OpAllGatherV:
		s = t.allGather(c)
	case comm.OpBroadcast:
		s = t.broadcast(c)
	case comm.OpAllToAll, comm.OpAllToAllV:
		s = t.allToAll(c)
	case comm.OpBarrier:
		s = t.barrier()
	default:
		return fmt.Errorf("tcp: unsupported op %v", c.Op)
	}
	return t.exec(ctx, c, s)
}

func (t *transport) allReduce(c *comm.Call) sched {
	n, r, es := t.n, t.rank, c.ElemSize()
	count := len(c.Send) / es
	lo := func(i int) int { return i * count / n }
	maxChunk := lo(1) + 1
	S, per := t.segs(maxChunk, es)
	right, left := mod(r+1, n), mod(r-1, n)
	var s sched
	for g := 0; g < 2*(n-1); g++ {
		var sc, rc int
		rs := g < n-1
		if rs {
			sc, rc = mod(r-g-1, n), mod(r-g-2, n)
		} else {
			k := g - (n - 1)
			sc, rc = mod(r-k, n), mod(r-k-1, n)
		}
		for j := 0; j < S; j++ {
			after := 0
			if g > 0 {
				after = (g-1)*S + j + 1
			}
			s.sends = append(s.sends, sendU{peer: right, data: part(c.Recv, es, lo(sc), lo(sc+1), j, per), after: after})
			s.recvs = append(s.recvs, recvU{peer: left, dst: part(c.Recv, es, lo(rc), lo(rc+1), j, per), reduce: rs, finish: g == n-2})
		}
	}
	return s
}

func (t *transport) reduceScatter(c *comm.Call) sched {
	n, r, es := t.n, t.rank, c.ElemSize()
	blk := c.SendCounts[0]
	S, per := t.segs(blk, es)
	need := (n - 2) * blk * es
	if len(t.tmp)*8 < need {
		t.tmp = make([]uint64, (need+7)/8)
	}
	tmp := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.tmp))), len(t.tmp)*8)
	src := func(b int) []byte { return c.Send[b*blk*es : (b+1)*blk*es] }
	slot := func(s int) []byte { return tmp[s*blk*es : (s+1)*blk*es] }
	right, left := mod(r+1, n), mod(r-1, n)
	var s sched
	for st := 0; st < n-1; st++ {
		sb, rb := mod(r-st-1, n), mod(r-st-2, n)
		from := src(sb)
		if st > 0 {
			from = slot(st - 1)
		}
		into := c.Recv
		if st < n-2 {
			into = slot(st)
		}
		for j := 0; j < S; j++ {
			after := 0
			if st > 0 {
				after = (st-1)*S + j + 1
			}
			s.sends = append(s.sends, sendU{peer: right, data: part(from, es, 0, blk, j, per), after: after})
			s.recvs = append(s.recvs, recvU{peer: left, dst: part(into, es, 0, blk, j, per), base: part(src(rb), es, 0, blk, j, per),
				reduce: true, finish: st == n-2})
		}
	}
	return s
}

func (t *transport) allGather(c *comm.Call) sched {
	n, r, es := t.n, t.rank, c.ElemSize()
	copy(c.Recv[c.RecvDispls[r]*es:], c.Send)
	maxc := 0
	for _, k := range c.RecvCounts {
		maxc = max(maxc, k)
	}
	S, per := t.segs(maxc, es)
	blk := func(b int) (int, int) { return c.RecvDispls[b], c.RecvDispls[b] + c.RecvCounts[b] }
	right, left := mod(r+1, n), mod(r-1, n)
	var s sched
	for st := 0; st < n-1; st++ {
		slo, shi := blk(mod(r-st, n))
		rlo, rhi := blk(mod(r-st-1, n))
		for j := 0; j < S; j++ {
			after := 0
			if st > 0 {
				after = (st-1)*S + j + 1
			}
			s.sends = append(s.sends, sendU{peer: right, data: part(c.Recv, es, slo, shi, j, per), after: after})
			s.recvs = append(s.recvs, recvU{peer: left, dst: part(c.Recv, es, rlo, rhi, j, per)})
		}
	}
	return s
}

func (t *transport) broadcast(c *comm.Call) sched {
	n, r, es := t.n, t.rank, c.ElemSize()
	count := len(c.Recv) / es
	S, per := t.segs(count, es)
	pos := mod(r-c.Root, n)
	next, prev := mod(r+1, n), mod(r-1, n)
	var s sched
	for j := 0; j < S; j++ {
		seg := part(c.Recv, es, 0, count, j, per)
		if pos > 0 {
			s.recvs = append(s.recvs, recvU{peer: prev, dst: seg})
		}
		if pos < n-1 {
			after := 0
			if pos > 0 {
				after = j + 1
			}
			s.sends = append(s.sends, sendU{peer: next, data: seg, after: after})
		}
	}
	return s
}

func (t *transport) allToAll(c *comm.Call) sched {
	n, r, es := t.n, t.rank, c.ElemSize()
	copy(c.Recv[c.RecvDispls[r]*es:(c.RecvDispls[r]+c.RecvCounts[r])*es], c.Send[c.SendDispls[r]*es:])
	var s sched
	for k := 1; k < n; k++ {
		to, from := mod(r+k, n), mod(r-k, n)
		sn := c.SendCounts[to]
		S, per := t.segs(sn, es)
		for j := 0; j < S; j++ {
			s.sends = append(s.sends, sendU{peer: to, data: part(c.Send, es, c.SendDispls[to], c.SendDispls[to]+sn, j, per)})
		}
		rn := c.RecvCounts[from]
		S, per = t.segs(rn, es)
		for j := 0; j < S; j++ {
			s.recvs = append(s.recvs, recvU{peer: from, dst: part(c.Recv, es, c.RecvDispls[from], c.RecvDispls[from]+rn, j, per)})
		}
	}
	return s
}

// barrier is a dissemination barrier: in round k every rank signals rank
// r+2^k and waits for rank r-2^k.
func (t *transport) barrier() sched {
	var s sched
	for k, d := 0, 1; d < t.n; k, d = k+1, d*2 {
		s.sends = append(s.sends, sendU{peer: mod(t.rank+d, t.n), after: k})
		s.recvs = append(s.recvs, recvU{peer: mod(t.rank-d, t.n)})
	}
	return s
}

// progress counts completed receives; the sender waits on it.
type progress struct {
	mu     sync.Mutex
	cond   *sync.Cond
	done   int
	failed bool
}

func (p *progress) wait(k int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.done < k && !p.failed {
		p.cond.Wait()
	}
	return !p.failed
}

func (p *progress) add() {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *progress) fail() {
	p.mu.Lock()
	p.failed = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

// dataHeader is the header of frame idx (n bytes) of c: magic, op,
// phase, dtype, sequence number, frame index, length, and c.Count(), so
// that ranks passing different counts fail instead of exchanging frames
// that happen to have the same length.
func dataHeader(c *comm.Call, idx uint32, n int) []byte {
	h := make([]byte, dataHdrLen)
	copy(h, dataMagic[:])
	h[4], h[5], h[6] = byte(c.Op), byte(c.Phase), byte(c.DType)
	binary.BigEndian.PutUint64(h[8:], c.Seq)
	binary.BigEndian.PutUint32(h[16:], idx)
	binary.BigEndian.PutUint32(h[20:], uint32(n))
	binary.BigEndian.PutUint64(h[24:], uint64(c.Count()))
	return h
}

// exec runs a schedule.
func (t *transport) exec(ctx context.Context, c *comm.Call, s sched) error {
	// Deadlines on every data connection; cancellation moves them to now.
	for _, p := range t.peers {
		if p != nil {
			p.data.SetDeadline(c.Deadline)
		}
	}
	// An abort that arrived before the deadlines were set would have its
	// unblocking overwritten: check again now (setAbort records the abort
	// before unblocking, so a later one still unblocks us).
	if err := t.abortErr(); err != nil {
		return t.failure(ctx, err)
	}
	stop := context.AfterFunc(ctx, t.unblock)
	defer stop()

	pr := &progress{}
	pr.cond = sync.NewCond(&pr.mu)
	var sendErr error
	var wg sync.WaitGroup
	if len(s.sends) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx := make([]uint32, t.n)
			for _, u := range s.sends {
				if u.after > 0 && !pr.wait(u.after) {
					return
				}
				p := t.peers[u.peer]
				bufs := net.Buffers{dataHeader(c, idx[u.peer], len(u.data)), u.data}
				idx[u.peer]++
				if _, err := bufs.WriteTo(p.data); err != nil {
					sendErr = t.ioErr(p, "sending to", err)
					t.unblock() // the receiver may be waiting on data that now cannot come
					return
				}
			}
		}()
	}
	recvErr := t.receive(c, s.recvs, pr)
	if recvErr != nil {
		pr.fail()
	}
	wg.Wait()
	err := recvErr
	if err == nil || (sendErr != nil && isDeadline(recvErr)) {
		err = sendErr
	}
	if err != nil {
		return t.failure(ctx, err)
	}
	return nil
}

func (t *transport) receive(c *comm.Call, recvs []recvU, pr *progress) error {
	idx := make([]uint32, t.n)
	h := make([]byte, dataHdrLen)
	scratch := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.scratch))), len(t.scratch)*8)
	for _, u := range recvs {
		p := t.peers[u.peer]
		if _, err := io.ReadFull(p.br, h); err != nil {
			return t.ioErr(p, "receiving from", err)
		}
		p.saw(binary.BigEndian.Uint64(h[8:]))
		if err := checkHeader(h, c, idx[u.peer], len(u.dst), t.rank, u.peer); err != nil {
			return err
		}
		idx[u.peer]++
		if !u.reduce {
			if _, err := io.ReadFull(p.br, u.dst); err != nil {
				return t.ioErr(p, "receiving from", err)
			}
		} else {
			in := scratch[:len(u.dst)]
			if _, err := io.ReadFull(p.br, in); err != nil {
				return t.ioErr(p, "receiving from", err)
			}
			base := u.base
			if base == nil {
				base = u.dst
			}
			reduce.Into3(c.DType, c.Red, u.dst, base, in)
			if u.finish {
				reduce.Finish(c.DType, c.Red, u.dst, t.n)
			}
		}
		pr.add()
	}
	return nil
}

func checkHeader(h []byte, c *comm.Call, idx uint32, n, rank, from int) error {
	if [4]byte(h[:4]) != dataMagic {
		return &comm.PeerError{Ranks: []int{from}, Err: comm.ErrProtocol, Msg: fmt.Sprintf("rank %d sent a malformed frame", from)}
	}
	op, phase, seq := comm.Op(h[4]), comm.Phase(h[5]), binary.BigEndian.Uint64(h[8:])
	gi, gn := binary.BigEndian.Uint32(h[16:]), binary.BigEndian.Uint32(h[20:])
	if op != c.Op || phase != c.Phase || seq != c.Seq {
		return &comm.PeerError{Ranks: []int{from}, Err: comm.ErrMismatch,
			Msg: fmt.Sprintf("rank %d sent data of %v #%d (phase %d) while this rank is in %v #%d (phase %d)", from, op, seq, phase, c.Op, c.Seq, c.Phase)}
	}
	theirs := comm.Desc{Seq: seq, Op: op, Phase: phase, DType: backend.DType(h[6]), Count: int64(binary.BigEndian.Uint64(h[24:]))}
	if err := comm.PeerMismatch(comm.DescOf(c), theirs, rank, from); err != nil {
		return err
	}
	if gi != idx || int64(gn) != int64(n) {
		return &comm.PeerError{Ranks: []int{from}, Err: comm.ErrMismatch,
			Msg: fmt.Sprintf("rank %d sent frame %d of %d bytes in %v #%d, expected frame %d of %d bytes (do the counts agree?)", from, gi, gn, c.Op, c.Seq, idx, n)}
	}
	return nil
}

func isDeadline(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}

// ioErr classifies an I/O error on peer p's data connection.
func (t *transport) ioErr(p *peer, what string, err error) error {
	if isDeadline(err) {
		return fmt.Errorf("%s rank %d: %w", what, p.rank, err)
	}
	why := p.goneReason()
	if why == "" {
		// The control reader may not have seen the EOF yet.
		time.Sleep(20 * time.Millisecond)
		why = p.goneReason()
	}
	if why == "" {
		why = fmt.Sprintf("rank %d's connection broke (exited?)", p.rank)
	}
	return &comm.PeerError{Ranks: []int{p.rank}, Err: comm.ErrPeerLost, Msg: fmt.Sprintf("%s rank %d: %s: %v", what, p.rank, why, err)}
}

// failure picks the error to report: an abort from a peer explains a
// local I/O error caused by unblocking, and cancellation beats the
// deadline it was implemented with.
func (t *transport) failure(ctx context.Context, err error) error {
	if ae := t.abortErr(); ae != nil {
		var a *comm.AbortError
		if errors.As(ae, &a) {
			return a
		}
		if errors.Is(ae, comm.ErrClosed) {
			return comm.ErrClosed
		}
		return fmt.Errorf("%w: %v", comm.ErrBroken, ae)
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return err
}
