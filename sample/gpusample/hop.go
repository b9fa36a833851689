package gpusample

import (
	_ "embed"
	"fmt"
	"math"
	"math/bits"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The hop API: the steps of one hop as separate calls, for collective
// samplers (package dsp/csp) that move frontier nodes to the device
// owning their rows, draw there and bring the neighbors back. Every call
// queues work on the device's stream inside Enqueue (the caller passes
// its backend.Queue) and returns without waiting; sizes that the caller
// passes are exact host-known counts. The draws are those of SampleDevice,
// so a batch assembled from these steps equals SampleDevice's.

//go:embed hop.cu
var hopSrc string

// NumNodes is the number of nodes (rows) of the sampler's graph.
func (s *Sampler) NumNodes() int64 { return s.n }

// Fanout returns the fanout of hop h (-1: every neighbor).
func (s *Sampler) Fanout(h int) int { return s.cfg.Fanouts[h] }

// Stepper runs the steps of a hop for a Sampler (see the hop API above).
// It holds the segmented draw kernel; it is safe for concurrent use as
// far as the Sampler is (calls serialize on the device).
type Stepper struct {
	s                       *Sampler
	sampleSeg, sampleStride backend.Kernel
}

// Stepper compiles and loads the kernels of the hop API (once per
// device; later calls find the module cached). Call it outside
// Enqueue.
func (s *Sampler) Stepper() (*Stepper, error) {
	mod, err := s.dev.LoadKernels("gpusample-hop", kernelSrc+hopSrc)
	if err != nil {
		return nil, err
	}
	t := &Stepper{s: s}
	if t.sampleSeg, err = mod.Kernel("gs_sample_seg"); err != nil {
		return nil, err
	}
	if t.sampleStride, err = mod.Kernel("gs_sample_stride"); err != nil {
		return nil, err
	}
	return t, nil
}

// scalar queues the upload of one int64 to a new device buffer.
func scalar(q backend.Queue, v int64) (backend.Buffer, error) {
	b, err := q.AllocRaw(backend.Int64, 1)
	if err != nil {
		return nil, err
	}
	if err := q.UploadFrom(b, []int64{v}); err != nil {
		q.Free(b)
		return nil, err
	}
	return b, nil
}

func hopErr(field, format string, args ...any) error {
	return &sample.Error{Op: "gpusample.hop", Field: field, Pos: -1, Detail: fmt.Sprintf(format, args...), Err: sample.ErrConfig}
}

// checkBuf requires b to be a device buffer of dt of at least n elements.
func checkBuf(name string, b backend.Buffer, dt backend.DType, n int64) error {
	if b == nil {
		return hopErr(name, "want %d elements of %v, have none", n, dt)
	}
	if b.DType() != dt || int64(b.Len()) < n {
		return hopErr(name, "want %d elements of %v, have %d of %v", n, dt, b.Len(), b.DType())
	}
	return nil
}

// bufSpec is one buffer argument: its name, the buffer, its element
// type and the fewest elements it must hold.
type bufSpec struct {
	name string
	b    backend.Buffer
	dt   backend.DType
	n    int64
}

// checkBufs applies checkBuf to each argument in turn.
func checkBufs(cs ...bufSpec) error {
	for _, c := range cs {
		if err := checkBuf(c.name, c.b, c.dt, c.n); err != nil {
			return err
		}
	}
	return nil
}

// checkSeg requires seg to be len(keys)+1 non-decreasing offsets from 0
// to n (DrawHop's node segments, one per key).
func checkSeg(seg []int64, keys []uint64, n int64) error {
	if len(keys) == 0 || len(seg) != len(keys)+1 || len(keys) >= math.MaxInt32 || seg[0] != 0 || seg[len(keys)] != n {
		return hopErr("seg", "%d offsets for %d keys over %d nodes", len(seg), len(keys), n)
	}
	for j := 1; j < len(seg); j++ {
		if seg[j] < seg[j-1] {
			return hopErr("seg", "offset %d = %d < %d", j, seg[j], seg[j-1])
		}
	}
	return nil
}

// CountHop queues, for the n nodes of dst (int32, global ids), the number
// of edges each yields at hop h and their exclusive scan: ptr (new,
// int64, n+1 entries; ptr[n] is the hop's edge count, to be read by the
// caller).
func (t *Stepper) CountHop(q backend.Queue, h int, dst backend.Buffer, n int64) (backend.Buffer, error) {
	s := t.s
	if h < 0 || h >= len(s.cfg.Fanouts) {
		return nil, hopErr("hop", "%d not in [0, %d)", h, len(s.cfg.Fanouts))
	}
	if n < 0 || n >= math.MaxInt32 {
		return nil, hopErr("n", "%d nodes", n)
	}
	if err := checkBuf("dst", dst, backend.Int32, n); err != nil {
		return nil, err
	}
	nd, err := scalar(q, n)
	if err != nil {
		return nil, err
	}
	defer q.Free(nd)
	counts, err := q.AllocRaw(backend.Int64, int(n+1))
	if err != nil {
		return nil, err
	}
	defer q.Free(counts)
	ptr, err := q.AllocRaw(backend.Int64, int(n+1))
	if err != nil {
		return nil, err
	}
	k := s.cfg.Fanouts[h]
	if err := q.Launch(s.fns["gs_count"], n+1, backend.Buf(counts), backend.Buf(dst), backend.Buf(nd), backend.I64(n),
		s.indptr, s.posDeg, backend.I32(int32(k)), backend.I32(b2i(s.cfg.Replace)), backend.I32(b2i(s.cfg.Weighted))); err != nil {
		q.Free(ptr)
		return nil, err
	}
	if err := q.ScanI64(ptr, counts, int(n+1)); err != nil {
		q.Free(ptr)
		return nil, err
	}
	return ptr, nil
}

// DrawHop queues the draws of hop h for the n nodes of dst at the offsets
// ptr (from CountHop): edge ids (positions in the sampler's graph) into
// eid (int64) and source nodes into src (int32), each holding e = ptr[n]
// entries. Nodes [seg[j], seg[j+1]) draw under hop key keys[j]; seg has
// len(keys)+1 non-decreasing offsets from 0 to n.
func (t *Stepper) DrawHop(q backend.Queue, h int, dst, ptr backend.Buffer, n int64, seg []int64, keys []uint64, eid, src backend.Buffer, e int64) error {
	s := t.s
	if h < 0 || h >= len(s.cfg.Fanouts) {
		return hopErr("hop", "%d not in [0, %d)", h, len(s.cfg.Fanouts))
	}
	if n < 0 || n >= math.MaxInt32 || e < 0 || e >= math.MaxInt32 {
		return hopErr("n", "%d nodes, %d edges", n, e)
	}
	if err := checkSeg(seg, keys, n); err != nil {
		return err
	}
	if err := checkBufs(bufSpec{"dst", dst, backend.Int32, n}, bufSpec{"ptr", ptr, backend.Int64, n + 1}, bufSpec{"eid", eid, backend.Int64, e}, bufSpec{"src", src, backend.Int32, e}); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	segB, err := q.AllocRaw(backend.Int64, len(seg))
	if err != nil {
		return err
	}
	defer q.Free(segB)
	keyB, err := q.AllocRaw(backend.Int64, len(keys))
	if err != nil {
		return err
	}
	defer q.Free(keyB)
	ks := make([]int64, len(keys))
	for j, k := range keys {
		ks[j] = int64(k)
	}
	if err := q.UploadFrom(segB, seg); err != nil {
		return err
	}
	if err := q.UploadFrom(keyB, ks); err != nil {
		return err
	}
	var kscr backend.Buffer
	if s.cfg.Weighted && !s.cfg.Replace {
		if kscr, err = q.AllocRaw(backend.Int64, int(max(e, 1))); err != nil {
			return err
		}
		defer q.Free(kscr)
	}
	k := s.cfg.Fanouts[h]
	return q.Launch(t.sampleSeg, n, backend.Buf(eid), backend.Buf(src), backend.Buf(kscr), backend.Buf(ptr), backend.Buf(dst), backend.I64(n),
		s.indptr, s.index, s.cum, s.w, s.posDeg,
		backend.I32(int32(k)), backend.I32(b2i(s.cfg.Replace)), backend.I32(b2i(s.cfg.Weighted)), backend.Buf(segB), backend.Buf(keyB), backend.I32(int32(len(keys))),
		s.dpos, s.didx)
}

// DrawStrided queues the draws of hop h (fanout k > 0) for the n nodes of
// dst into fixed slots: node i's draws (as DrawHop's, in the same order)
// fill slots [i*k, i*k+m) of src (int32 source nodes) and eid (int64
// edge ids plus edgeBase), and slots [i*k+m, (i+1)*k) hold -1. No count
// pass or scan is needed, and m can be recovered from the padding.
// Segments and keys are as in DrawHop. src and eid hold n*k entries.
func (t *Stepper) DrawStrided(q backend.Queue, h int, dst backend.Buffer, n int64, seg []int64, keys []uint64, eid, src backend.Buffer, edgeBase int64) error {
	s := t.s
	if h < 0 || h >= len(s.cfg.Fanouts) {
		return hopErr("hop", "%d not in [0, %d)", h, len(s.cfg.Fanouts))
	}
	k := int64(s.cfg.Fanouts[h])
	if k <= 0 {
		return hopErr("hop", "hop %d has fanout %d: strided draws need a fixed fanout", h, k)
	}
	if n < 0 || n*k >= math.MaxInt32 {
		return hopErr("n", "%d nodes at fanout %d", n, k)
	}
	if err := checkSeg(seg, keys, n); err != nil {
		return err
	}
	if err := checkBufs(bufSpec{"dst", dst, backend.Int32, n}, bufSpec{"eid", eid, backend.Int64, n * k}, bufSpec{"src", src, backend.Int32, n * k}); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	// One upload: the offsets, then the keys.
	sk := make([]int64, 0, 2*len(keys)+1)
	sk = append(sk, seg...)
	for _, key := range keys {
		sk = append(sk, int64(key))
	}
	skB, err := q.AllocRaw(backend.Int64, len(sk))
	if err != nil {
		return err
	}
	defer q.Free(skB)
	if err := q.UploadFrom(skB, sk); err != nil {
		return err
	}
	var kscr backend.Buffer
	if s.cfg.Weighted && !s.cfg.Replace {
		if kscr, err = q.AllocRaw(backend.Int64, int(n*k)); err != nil {
			return err
		}
		defer q.Free(kscr)
	}
	return q.Launch(t.sampleStride, n, backend.Buf(eid), backend.Buf(src), backend.Buf(kscr), backend.Buf(dst), backend.I64(n),
		s.indptr, s.index, s.cum, s.w, s.posDeg,
		backend.I32(int32(k)), backend.I32(b2i(s.cfg.Replace)), backend.I32(b2i(s.cfg.Weighted)), backend.Buf(skB), backend.I32(int32(len(keys))), backend.I64(edgeBase),
		s.dpos, s.didx)
}

// Relabel queues the deduplication of the hop [dst[0:nd), src[0:e)]
// (ptr: nd+1 row offsets into src) exactly as SampleDevice does:
// destinations keep ids 0..nd-1, new sources follow in first-seen order.
// It returns srcNodes (int32, nd+e entries, the first numSrc valid),
// local (int32, max(e,1) entries: the block's column indices) and sizes
// (int64 {nd, e, numSrc} on the device, for the caller to read).
func (t *Stepper) Relabel(q backend.Queue, dst backend.Buffer, nd int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	s := t.s
	if nd < 0 || e < 0 || nd+e >= math.MaxInt32/2 {
		return nil, nil, nil, hopErr("nd", "%d destinations and %d edges", nd, e)
	}
	if err := checkBufs(bufSpec{"dst", dst, backend.Int32, nd}, bufSpec{"ptr", ptr, backend.Int64, nd + 1}, bufSpec{"src", src, backend.Int32, e}); err != nil {
		return nil, nil, nil, err
	}
	var tmp, kept []backend.Buffer
	defer func() {
		for _, b := range tmp {
			q.Free(b)
		}
		if err != nil {
			for _, b := range kept {
				q.Free(b)
			}
		}
	}()
	alloc := func(dt backend.DType, n int64, keep bool) (backend.Buffer, error) {
		b, err := q.AllocRaw(dt, int(n))
		if err != nil {
			return nil, err
		}
		if keep {
			kept = append(kept, b)
		} else {
			tmp = append(tmp, b)
		}
		return b, nil
	}
	ndB, err := scalar(q, nd)
	if err != nil {
		return nil, nil, nil, err
	}
	tmp = append(tmp, ndB)
	pmax := nd + e
	capacity := int64(1) << bits.Len64(uint64(2*pmax+1))
	tkeys, err := alloc(backend.Int32, capacity, false)
	if err != nil {
		return nil, nil, nil, err
	}
	tpos, err := alloc(backend.Int32, capacity, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if err = q.Memset(tkeys, 0xff); err != nil { // -1: empty
		return nil, nil, nil, err
	}
	if err = q.Memset(tpos, 0x7f); err != nil { // large position
		return nil, nil, nil, err
	}
	mask := backend.U64(uint64(capacity - 1))
	if err = q.Launch(s.fns["gs_insert"], pmax, backend.Buf(tkeys), backend.Buf(tpos), mask, backend.Buf(dst), backend.Buf(ndB),
		backend.Buf(src), backend.Buf(ptr)); err != nil {
		return nil, nil, nil, err
	}
	flags, err := alloc(backend.Int64, pmax+1, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if err = q.Launch(s.fns["gs_flags"], pmax+1, backend.Buf(flags), backend.Buf(tkeys), backend.Buf(tpos), mask,
		backend.Buf(dst), backend.Buf(ndB), backend.Buf(src), backend.Buf(ptr), backend.I64(pmax)); err != nil {
		return nil, nil, nil, err
	}
	newid, err := alloc(backend.Int64, pmax+1, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if err = q.ScanI64(newid, flags, int(pmax+1)); err != nil {
		return nil, nil, nil, err
	}
	if srcNodes, err = alloc(backend.Int32, max(pmax, 1), true); err != nil {
		return nil, nil, nil, err
	}
	if local, err = alloc(backend.Int32, max(e, 1), true); err != nil {
		return nil, nil, nil, err
	}
	if sizes, err = alloc(backend.Int64, 3, true); err != nil {
		return nil, nil, nil, err
	}
	if err = q.Launch(s.fns["gs_relabel"], max(pmax, 1), backend.Buf(srcNodes), backend.Buf(local), backend.Buf(sizes),
		backend.Buf(newid), backend.Buf(tkeys), backend.Buf(tpos), mask, backend.Buf(dst), backend.Buf(ndB),
		backend.Buf(src), backend.Buf(ptr), backend.I64(pmax)); err != nil {
		return nil, nil, nil, err
	}
	return srcNodes, local, sizes, nil
}

// NewBatch assembles a Batch on dev from blocks built with the hop API
// (first layer first: the last block's destinations are seeds). The
// Batch owns the blocks' buffers from then on.
func NewBatch(dev backend.Backend, seeds []graph.NodeID, blocks []Block) *Batch {
	return &Batch{dev: dev, Seeds: seeds, Blocks: blocks}
}
