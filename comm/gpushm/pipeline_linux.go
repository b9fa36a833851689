//go:build linux

package gpushm

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/reduce"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
)

// The host pipeline: all-reduces larger than the device path takes are
// cut into chunks that are copied into the segment, reduced by the CPUs
// and copied back (see the package doc).

// job is one all-reduce.
type job struct {
	c       *comm.DeviceCall
	es      int
	bytes   int
	cb, nq  int
	q0      uint64       // global index of chunk 0
	redDone atomic.Int32 // chunks whose share this rank has reduced
}

func (j *job) chunk(i int) (lo, hi int) {
	lo = i * j.cb
	return lo, min(lo+j.cb, j.bytes)
}

// piece is part of this rank's share of one chunk, for a reducer.
type piece struct {
	j      *job
	slot   int
	u      uint32
	lo, hi int // bytes within the chunk
	left   *atomic.Int32
}

// chunkBytes cuts b bytes into about t.chunks chunks of minPipeChunk to
// the segment's chunk size, multiples of 4096.
func (t *transport) chunkBytes(b int) int {
	c := sg.AlignUp((b+t.chunks-1)/t.chunks, page)
	return min(max(c, minPipeChunk), t.seg.L.SlotBytes)
}

func (t *transport) slotOf(q uint64) (int, uint32) {
	return int(q % uint64(t.seg.L.Slots)), uint32(q / uint64(t.seg.L.Slots))
}

// allAt reports whether flag(r, s) has reached want for every rank r, and
// otherwise the first rank that has not.
func (t *transport) allAt(flag func(r, s int) *uint32, s int, want uint32) (bool, int) {
	for r := 0; r < t.n; r++ {
		if !sg.Reached(atomic.LoadUint32(flag(r, s)), want) {
			return false, r
		}
	}
	return true, -1
}

func (t *transport) allReduce(ctx context.Context, c *comm.DeviceCall) error {
	es := c.DType.Size()
	b := c.Recv.Len() * es
	j := &job{c: c, es: es, bytes: b, cb: t.chunkBytes(b), q0: t.q}
	j.nq = max(1, (b+j.cb-1)/j.cb) // an empty call streams one empty chunk, so that its header is checked
	defer func() { t.q += uint64(j.nq) }()
	unbind, err := t.mv.bind()
	defer unbind()
	if err != nil {
		return err
	}
	if err := t.mv.begin(c.Recv); err != nil {
		return err
	}
	seg, me, slots := t.seg, t.rank, t.seg.L.Slots
	hdr := sg.Header{Desc: comm.DeviceDescOf(c)} // in the cache line of each in flag
	var issued, inDone, redIssued, outIssued, outDone int
	w := t.newIdler(ctx, c.Deadline, c.Seq)
	var pt pipeTimes // host times, when tracing
	if t.tr != nil {
		pt.start = time.Now()
		pt.firstSlot, _ = t.slotOf(j.q0)
		pt.lastSlot, _ = t.slotOf(j.q0 + uint64(j.nq-1))
		defer func() { t.tr.pipeOp(t.mv, pt) }()
	}
	fail := func(err error) error {
		t.drain(j, issued, inDone, redIssued, outIssued, outDone)
		return err
	}
	for outDone < j.nq {
		progress := false
		w.who, w.what = -1, ""
		// 1. Copy-in, when every rank is done with the slot's last chunk.
		for issued < j.nq && issued-outDone < slots {
			s, u := t.slotOf(j.q0 + uint64(issued))
			if ok, r := t.allAt(seg.doneFlag, s, u); !ok {
				w.who, w.what = r, "a shared slot to be free"
				break
			}
			lo, hi := j.chunk(issued)
			if err := t.mv.toHost(s, seg.InSlot(me, s)[:hi-lo], c.Recv, lo); err != nil {
				return fail(err)
			}
			issued++
			progress = true
		}
		// 2. Copy-in complete: announce it.
		for inDone < issued {
			s, u := t.slotOf(j.q0 + uint64(inDone))
			ok, err := t.mv.inDone(s)
			if err != nil {
				return fail(err)
			}
			if !ok {
				break
			}
			sg.SetHeader(seg.inFlag(me, s), hdr)
			sg.Set(seg.inFlag(me, s), u+1)
			if inDone == 0 && t.tr != nil {
				pt.firstIn = time.Now()
			}
			inDone++
			progress = true
		}
		// 3. Reduce this rank's share once every rank's chunk is in (at
		// most two chunks queued for the reducers).
		for redIssued < inDone && redIssued-int(j.redDone.Load()) < 2 {
			s, u := t.slotOf(j.q0 + uint64(redIssued))
			if ok, r := t.allAt(seg.inFlag, s, u+1); !ok {
				w.who, w.what = r, "its share of a chunk"
				break
			}
			// Every rank's chunk must belong to this operation and count.
			for r := 0; r < t.n; r++ {
				if err := comm.PeerMismatch(hdr.Desc, sg.GetHeader(seg.inFlag(r, s)).Desc, me, r); r != me && err != nil {
					return fail(err)
				}
			}
			t.dispatch(j, redIssued, s, u)
			redIssued++
			if redIssued == j.nq && t.tr != nil {
				pt.allIn = time.Now()
			}
			progress = true
		}
		// 4. Copy-out once every rank has reduced its share.
		for outIssued < redIssued {
			s, u := t.slotOf(j.q0 + uint64(outIssued))
			if ok, r := t.allAt(seg.redFlag, s, u+1); !ok {
				w.who, w.what = r, "a reduced chunk"
				break
			}
			lo, hi := j.chunk(outIssued)
			if err := t.mv.toDevice(s, c.Recv, lo, seg.ResSlot(s)[:hi-lo]); err != nil {
				return fail(err)
			}
			outIssued++
			if outIssued == j.nq && t.tr != nil {
				pt.allRed = time.Now()
			}
			progress = true
		}
		// 5. Copy-out complete: the slot may be reused.
		for outDone < outIssued {
			s, u := t.slotOf(j.q0 + uint64(outDone))
			ok, err := t.mv.outDone(s)
			if err != nil {
				return fail(err)
			}
			if !ok {
				break
			}
			sg.Set(seg.doneFlag(me, s), u+1)
			outDone++
			if outDone == j.nq && t.tr != nil {
				pt.end = time.Now()
			}
			progress = true
		}
		if progress {
			w.progress()
			continue
		}
		if err := w.idle(); err != nil {
			return fail(err)
		}
	}
	return nil
}

// dispatch queues this rank's share of chunk i for the reducers.
func (t *transport) dispatch(j *job, i, s int, u uint32) {
	lo, hi := j.chunk(i)
	elems := (hi - lo) / j.es
	a := lo + t.rank*elems/t.n*j.es
	z := lo + (t.rank+1)*elems/t.n*j.es
	a, z = a-lo, z-lo // within the chunk
	share := z - a
	if share == 0 {
		sg.Set(t.seg.redFlag(t.rank, s), u+1)
		j.redDone.Add(1)
		return
	}
	left := new(atomic.Int32)
	if share <= t.inline {
		// Small: reduce here, sparing the reducers' wake-up.
		left.Store(1)
		t.reduce(piece{j: j, slot: s, u: u, lo: a, hi: z, left: left})
		return
	}
	k := min(cap(t.pieces)/4, max(1, share/(64<<10)))
	left.Store(int32(k))
	for p := 0; p < k; p++ {
		pa := a + p*(share/j.es)/k*j.es
		pz := a + (p+1)*(share/j.es)/k*j.es
		t.pieces <- piece{j: j, slot: s, u: u, lo: pa, hi: pz, left: left}
	}
}

// subBlock keeps a reduction's working set in cache.
const subBlock = 32 << 10

// worker reduces pieces: out = x_0 op x_1 op ... op x_{n-1} in rank
// order, where x_r is rank r's input slot, into the result slot.
func (t *transport) worker() {
	defer t.workers.Done()
	for p := range t.pieces {
		t.reduce(p)
	}
}

// reduce computes piece p; the last piece of a chunk raises this rank's
// red flag.
func (t *transport) reduce(p piece) {
	c := p.j.c
	out := t.seg.ResSlot(p.slot)
	blk := subBlock / p.j.es * p.j.es
	for a := p.lo; a < p.hi; a += blk {
		b := min(a+blk, p.hi)
		if t.n == 1 {
			copy(out[a:b], t.seg.InSlot(0, p.slot)[a:b])
		} else {
			reduce.Into3(c.DType, c.Red, out[a:b], t.seg.InSlot(0, p.slot)[a:b], t.seg.InSlot(1, p.slot)[a:b])
			for r := 2; r < t.n; r++ {
				reduce.Into(c.DType, c.Red, out[a:b], t.seg.InSlot(r, p.slot)[a:b])
			}
		}
		reduce.Finish(c.DType, c.Red, out[a:b], t.n)
	}
	if p.left.Add(-1) == 0 {
		sg.Set(t.seg.redFlag(t.rank, p.slot), p.u+1)
		p.j.redDone.Add(1)
	}
}

// drain waits (briefly) for the copies and reductions already queued by
// a failing all-reduce, so none of them lands after it returns.
func (t *transport) drain(j *job, issued, inDone, redIssued, outIssued, outDone int) {
	dl := time.Now().Add(2 * time.Second)
	for time.Now().Before(dl) {
		busy := int(j.redDone.Load()) < redIssued
		for i := inDone; i < issued && !busy; i++ {
			s, _ := t.slotOf(j.q0 + uint64(i))
			ok, err := t.mv.inDone(s)
			busy = !ok && err == nil
		}
		for i := outDone; i < outIssued && !busy; i++ {
			s, _ := t.slotOf(j.q0 + uint64(i))
			ok, err := t.mv.outDone(s)
			busy = !ok && err == nil
		}
		if !busy {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}
