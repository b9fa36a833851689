package csp

import (
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/graph"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// gpuMachine is the machine of a CUDA device: the patch's sampler and
// hop API (package gpusample), this package's kernels (csp.cu) and a
// pinned buffer for reads.
type gpuMachine struct {
	dev      *cuda.Device
	st       *gpusample.Stepper
	fns      map[string]cu.Function
	offB     *cuda.Buffer     // partition offsets on the device
	pin      *cuda.HostBuffer // reads land here
	P        int
	edgeBase int64
}

var kernels = []string{"csp_route_count", "csp_route_scatter", "csp_stride_counts", "csp_stride_compact",
	"csp_totals", "csp_pack", "csp_add_i64", "csp_unpack_counts", "csp_unpack_src"}

// newGPUMachine loads module name (src after the common source, kernels
// fns) on dev and prepares the machine of a rank of P: the partition
// offsets on the device and the pinned read area. st is the patch's hop
// API (nil where no hop step is used). On failure nothing is left.
func newGPUMachine(dev *cuda.Device, st *gpusample.Stepper, name, src string, fns []string, P int, offsets []int64, edgeBase int64) (g *gpuMachine, err error) {
	g = &gpuMachine{dev: dev, st: st, fns: map[string]cu.Function{}, P: P, edgeBase: edgeBase}
	defer func() {
		if err != nil {
			g.close()
			g = nil
		}
	}()
	mod, err := dev.LoadModule(name, cuda.CommonSource()+src)
	if err != nil {
		return nil, err
	}
	for _, fn := range fns {
		if g.fns[fn], err = mod.Func(fn); err != nil {
			return nil, err
		}
	}
	ob, err := g.alloc(backend.Int64, int64(P+1))
	if err != nil {
		return nil, err
	}
	g.offB = ob.(*cuda.Buffer)
	if err := g.upload(g.offB, offsets); err != nil {
		return nil, err
	}
	if g.pin, err = dev.AllocHost(uint64(8*readWords(P)), false); err != nil {
		return nil, err
	}
	return g, nil
}

func cb(b backend.Buffer) *cuda.Buffer {
	if b == nil {
		return nil
	}
	return b.(*cuda.Buffer)
}

func ptr(b backend.Buffer) uint64 { return uint64(cb(b).Ptr()) }

func (g *gpuMachine) alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	var b *cuda.Buffer
	err := g.dev.Do(func(l *cuda.Locked) error {
		var err error
		b, err = l.Alloc(dt, int(max(n, 1)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) free(b backend.Buffer) { g.dev.Free(b) }

func (g *gpuMachine) view(b backend.Buffer, off, n int64) backend.Buffer {
	return cb(b).View(int(off), int(n))
}

func (g *gpuMachine) upload(dst backend.Buffer, src any) error {
	return g.dev.Do(func(l *cuda.Locked) error { return l.UploadFrom(cb(dst), src) })
}

func (g *gpuMachine) read(dst []int64, srcs []backend.Buffer, n []int64) error {
	return g.dev.Do(func(l *cuda.Locked) error {
		var at uint64
		for i, b := range srcs {
			w := uint64(8 * n[i])
			if at+w > g.pin.Len() {
				return fmt.Errorf("csp: a read of %d bytes exceeds the pinned buffer", at+w)
			}
			if err := l.CopyToHost(g.pin, at, cb(b), w); err != nil {
				return err
			}
			at += w
		}
		if err := l.Sync(); err != nil {
			return err
		}
		copy(dst, g.pin.Int64s()[:at/8])
		return nil
	})
}

func (g *gpuMachine) route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	P := int64(g.P)
	return g.dev.Do(func(l *cuda.Locked) error {
		if err := l.Memset(cb(ctr), 0); err != nil {
			return err
		}
		cnt, cur := cb(ctr).View(0, int(P+1)), cb(ctr).View(int(P+1), int(P+1))
		n := max(fcap, 1) // the scatter writes the header even for no nodes
		if err := l.Launch1D(g.fns["csp_route_count"], n, ptr(cnt), ptr(F), ptr(nFB), uint64(g.offB.Ptr()), cu.I32(int32(P))); err != nil {
			return err
		}
		return l.Launch1D(g.fns["csp_route_scatter"], n, ptr(sendIDs), ptr(pos), ptr(cur), ptr(cnt), ptr(F), ptr(nFB),
			uint64(g.offB.Ptr()), cu.I32(int32(P)), ptr(hdr), cu.I32(hWords), key, cu.I32(int32(hop)), cu.I32(int32(fanout)), cu.I32(int32(hops)))
	})
}

func (g *gpuMachine) drawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error {
	return g.dev.Do(func(l *cuda.Locked) error {
		return g.st.DrawStrided(l, h, cb(ids), R, seg, keys, cb(ansE), cb(ans), g.edgeBase)
	})
}

func (g *gpuMachine) unpackStrided(ptrB, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error {
	return g.dev.Do(func(l *cuda.Locked) error {
		cnt, err := l.Alloc(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		defer l.Free(cnt)
		if err := l.Launch1D(g.fns["csp_stride_counts"], nF+1, uint64(cnt.Ptr()), ptr(ans), ptr(pos), cu.I64(nF), cu.I32(int32(k))); err != nil {
			return err
		}
		if err := l.ScanI64(cb(ptrB), cnt, int(nF+1)); err != nil {
			return err
		}
		var ansEP uint64
		if ansE != nil {
			ansEP = ptr(ansE)
		}
		return l.Launch1D(g.fns["csp_stride_compact"], nF*int64(k), ptr(src), ptr(eid), ptr(ans), ansEP, ptr(ptrB), ptr(pos),
			cu.I64(nF), cu.I32(int32(k)))
	})
}

// uploadRoff copies the P+1 rank offsets roff to a new device buffer.
func (g *gpuMachine) uploadRoff(l *cuda.Locked, roff []int64) (*cuda.Buffer, error) {
	b, err := l.Alloc(backend.Int64, g.P+1)
	if err != nil {
		return nil, err
	}
	if err := l.UploadFrom(b, roff); err != nil {
		l.Free(b)
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) countExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error) {
	var q, t *cuda.Buffer
	err = g.dev.Do(func(l *cuda.Locked) error {
		var err error
		if q, err = g.st.CountHop(l, h, cb(ids), R); err != nil {
			return err
		}
		roffB, err := g.uploadRoff(l, roff)
		if err != nil {
			return err
		}
		defer l.Free(roffB)
		if t, err = l.Alloc(backend.Int64, g.P+1); err != nil {
			return err
		}
		return l.Launch1D(g.fns["csp_totals"], int64(g.P+1), uint64(t.Ptr()), uint64(q.Ptr()), uint64(roffB.Ptr()), cu.I32(int32(g.P)))
	})
	if err != nil {
		if q != nil {
			g.dev.Free(q)
		}
		if t != nil {
			g.dev.Free(t)
		}
		return nil, nil, err
	}
	return q, t, nil
}

func (g *gpuMachine) drawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error {
	return g.dev.Do(func(l *cuda.Locked) error {
		src, err := l.Alloc(backend.Int32, int(max(E, 1)))
		if err != nil {
			return err
		}
		defer l.Free(src)
		roffB, err := g.uploadRoff(l, roff)
		if err != nil {
			return err
		}
		defer l.Free(roffB)
		if err := g.st.DrawHop(l, h, cb(ids), cb(qptr), R, roff, keys, cb(eid), src, E); err != nil {
			return err
		}
		if err := l.Launch1D(g.fns["csp_pack"], R, ptr(packed), ptr(qptr), uint64(src.Ptr()), uint64(roffB.Ptr()), cu.I32(int32(g.P)), cu.I64(R)); err != nil {
			return err
		}
		return l.Launch1D(g.fns["csp_add_i64"], E, ptr(eid), cu.I64(E), cu.I64(g.edgeBase))
	})
}

func (g *gpuMachine) unpackExact(ptrB, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error {
	P := g.P
	return g.dev.Do(func(l *cuda.Locked) error {
		var tmp []*cuda.Buffer
		defer func() {
			for _, b := range tmp {
				l.Free(b)
			}
		}()
		alloc := func(dt backend.DType, n int) (*cuda.Buffer, error) {
			b, err := l.Alloc(dt, max(n, 1))
			if err == nil {
				tmp = append(tmp, b)
			}
			return b, err
		}
		cnt, err := alloc(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		cntS, err := alloc(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		sptr, err := alloc(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		bs, err := alloc(backend.Int64, 2*P+1) // bptr, then S
		if err != nil {
			return err
		}
		if err := l.UploadFrom(bs, append(append(make([]int64, 0, 2*P+1), bptr...), S...)); err != nil {
			return err
		}
		bptrB, SB := bs.View(0, P+1), bs.View(P+1, P)
		if err := l.Launch1D(g.fns["csp_unpack_counts"], nF+1, uint64(cnt.Ptr()), uint64(cntS.Ptr()), ptr(ans),
			uint64(bptrB.Ptr()), uint64(SB.Ptr()), ptr(pos), cu.I32(int32(P)), cu.I64(nF)); err != nil {
			return err
		}
		if err := l.ScanI64(cb(ptrB), cnt, int(nF+1)); err != nil {
			return err
		}
		if err := l.ScanI64(sptr, cntS, int(nF+1)); err != nil {
			return err
		}
		var eidP, ansEP uint64
		if ansE != nil {
			eidP, ansEP = ptr(eid), ptr(ansE)
		} else if err := l.Memset(cb(eid), 0xff); err != nil { // -1: not asked for
			return err
		}
		return l.Launch1D(g.fns["csp_unpack_src"], nF, ptr(src), eidP, ptr(ans), ansEP, ptr(ptrB),
			uint64(sptr.Ptr()), uint64(bptrB.Ptr()), ptr(pos), cu.I32(int32(P)), cu.I64(nF))
	})
}

func (g *gpuMachine) relabel(F backend.Buffer, nF int64, src, ptrB backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	var a, b, c *cuda.Buffer
	err = g.dev.Do(func(l *cuda.Locked) error {
		var err error
		a, b, c, err = g.st.Relabel(l, cb(F), nF, cb(src), cb(ptrB), e)
		return err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return a, b, c, nil
}

// batch wraps the parts as a gpusample.Batch: buffers truncated to the
// device's sizes, each block's structure a cuda.Sparse. On failure
// everything is freed.
func (g *gpuMachine) batch(outs []hopOut, seeds []graph.NodeID) (*Batch, error) {
	L := len(outs)
	blocks := make([]gpusample.Block, L)
	var werr error
	for h := range L {
		o := &outs[h]
		if o.sizes != nil {
			g.dev.Free(o.sizes)
			o.sizes = nil
		}
		blk := &blocks[L-1-h]
		if werr == nil {
			for _, t := range []struct {
				b backend.Buffer
				n int64
			}{{o.srcNodes, o.ns}, {o.local, o.e}, {o.eid, o.e}} {
				if werr = cb(t.b).Truncate(int(t.n)); werr != nil {
					break
				}
			}
		}
		if werr == nil {
			blk.A, werr = g.dev.NewSparseFromDevice(int(o.nd), int(o.ns), cb(o.ptr), cb(o.local))
		}
		if blk.A == nil {
			o.free(g)
			continue
		}
		*blk = gpusample.Block{NumDst: int(o.nd), NumSrc: int(o.ns), NumEdges: int(o.e), A: blk.A, SrcNodes: cb(o.srcNodes), EdgeIDs: cb(o.eid)}
	}
	b := gpusample.NewBatch(g.dev, slices.Clone(seeds), blocks)
	if werr != nil {
		b.Free()
		return nil, werr
	}
	return &Batch{Device: b}, nil
}

func (g *gpuMachine) shrink(b backend.Buffer, n int64) (backend.Buffer, error) {
	if err := cb(b).Truncate(int(n)); err != nil {
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) close() error {
	var first error
	if g.offB != nil {
		g.dev.Free(g.offB)
		g.offB = nil
	}
	if g.pin != nil {
		first = g.pin.Free()
		g.pin = nil
	}
	return first
}
