package cudadsp

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

func init() { csp.RegisterDevice(cspDevice{}) }

// sampleDevice is what the sampling machines need of a back end: kernels
// compiled at run time and its queue to launch them on, pinned memory
// (for reads, and mapped for the Mapped and Split placements) and
// matrices over the blocks they build (the CUDA back end).
type sampleDevice interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
	backend.SparseBuilder
}

// cspDevice is csp's Device: the machines of this package's kernels on
// the back ends with sampleDevice's capabilities.
type cspDevice struct{}

func (cspDevice) Accepts(be backend.Backend) bool {
	_, ok := be.(sampleDevice)
	return ok
}

func asSampleDevice(be backend.Backend) (sampleDevice, error) {
	d, ok := be.(sampleDevice)
	if !ok {
		return nil, fmt.Errorf("cudadsp: %s (%T) cannot run the sampling kernels (backend.Kernels, Enqueuer, PinnedMemory, SparseBuilder)", be.Name(), be)
	}
	return d, nil
}

// Sampler is gpusample over the patch (cfg's placement) and the
// node-wise kernels over its hop API.
func (cspDevice) Sampler(be backend.Backend, patch *layout.Patch, offsets []int64, P int, cfg csp.Config) (csp.SamplerMachine, error) {
	dev, err := asSampleDevice(be)
	if err != nil {
		return nil, err
	}
	var rows []graph.NodeID
	if cfg.Placement == gpusample.Split {
		rows = patch.DeviceRowIDs()
	}
	gs, err := gpusample.New(dev, patch.Graph, gpusample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: cfg.Placement, DeviceRows: rows})
	if err != nil {
		return nil, err
	}
	return newSamplerMachine(dev, gs, P, offsets, patch.EdgeBase)
}

// Layer is the layer-wise machine: uniform draws use gpusample's hop API
// over the patch; weighted ones read the machine's copy of the rows, so
// gpusample then gets a one-node graph and serves relabeling only.
func (cspDevice) Layer(be backend.Backend, patch *layout.Patch, offsets []int64, P int, cfg csp.Config) (csp.LayerMachine, error) {
	dev, err := asSampleDevice(be)
	if err != nil {
		return nil, err
	}
	gcfg := gpusample.Config{Fanouts: layerGSFanouts, Replace: cfg.Replace, Placement: cfg.Placement}
	if cfg.Placement == gpusample.Split {
		gcfg.DeviceRows = patch.DeviceRowIDs()
	}
	g := patch.Graph
	if cfg.Weighted {
		g, gcfg.Placement, gcfg.DeviceRows = &graph.CSR{NumRows: 1, NumCols: 1, Indptr: []int64{0, 0}}, gpusample.OnDevice, nil
	}
	gs, err := gpusample.New(dev, g, gcfg)
	if err != nil {
		return nil, err
	}
	lm, err := newGPULayerMachine(dev, gs, patch, offsets, P, cfg)
	if err != nil {
		gs.Close()
		return nil, err
	}
	lm.gs = gs
	return lm, nil
}

// Walker is the walk machine over the rows this rank owns.
func (cspDevice) Walker(be backend.Backend, patch *layout.Patch, offsets []int64, P, length int, placement gpusample.Placement) (csp.WalkMachine, error) {
	dev, err := asSampleDevice(be)
	if err != nil {
		return nil, err
	}
	return newGPUWalkMachine(dev, patch, offsets, P, length, placement)
}

// samplerMachine is the node-wise machine: gpuMachine over the hop API
// of gs, which it owns (direct sampling and siblings use it too).
type samplerMachine struct {
	*gpuMachine
	gs      *gpusample.Sampler
	offsets []int64
}

// newSamplerMachine loads the node-wise kernels over gs's hop API; on
// failure it closes gs.
func newSamplerMachine(dev sampleDevice, gs *gpusample.Sampler, P int, offsets []int64, edgeBase int64) (*samplerMachine, error) {
	st, err := gs.Stepper()
	if err != nil {
		gs.Close()
		return nil, err
	}
	gm, err := newGPUMachine(dev, st, "csp", cspSrc, cspKernels, P, offsets, edgeBase)
	if err != nil {
		gs.Close()
		return nil, err
	}
	return &samplerMachine{gpuMachine: gm, gs: gs, offsets: offsets}, nil
}

func (m *samplerMachine) Sample(seeds []graph.NodeID, key sample.Key) (*csp.Batch, error) {
	b, err := m.gs.SampleDevice(seeds, key)
	if err != nil {
		return nil, err
	}
	return &csp.Batch{Device: b}, nil
}

func (m *samplerMachine) Sibling(dev backend.Backend) (csp.SamplerMachine, error) {
	d, err := asSampleDevice(dev)
	if err != nil {
		return nil, err
	}
	gs, err := m.gs.Sibling(d)
	if err != nil {
		return nil, err
	}
	return newSamplerMachine(d, gs, m.P, m.offsets, m.edgeBase)
}

// Close closes the sampler, then the kernels' buffers.
func (m *samplerMachine) Close() error {
	first := m.gs.Close()
	if err := m.gpuMachine.Close(); first == nil {
		first = err
	}
	return first
}

// gpuMachine is the machine of a CUDA device: the patch's sampler and
// hop API (package gpusample), this package's kernels (csp.cu) and a
// pinned buffer for reads.
type gpuMachine struct {
	dev      sampleDevice
	st       *gpusample.Stepper
	fns      map[string]backend.Kernel
	offB     backend.Buffer     // partition offsets on the device
	pin      backend.HostBuffer // reads land here
	P        int
	edgeBase int64
}

//go:embed csp.cu
var cspSrc string

var cspKernels = []string{"csp_route_count", "csp_route_scatter", "csp_stride_counts", "csp_stride_compact",
	"csp_totals", "csp_pack", "csp_add_i64", "csp_unpack_counts", "csp_unpack_src"}

// newGPUMachine loads module name (src after the common source, kernels
// fns) on dev and prepares the machine of a rank of P: the partition
// offsets on the device and the pinned read area. st is the patch's hop
// API (nil where no hop step is used). On failure nothing is left.
func newGPUMachine(dev sampleDevice, st *gpusample.Stepper, name, src string, fns []string, P int, offsets []int64, edgeBase int64) (g *gpuMachine, err error) {
	g = &gpuMachine{dev: dev, st: st, fns: map[string]backend.Kernel{}, P: P, edgeBase: edgeBase}
	defer func() {
		if err != nil {
			g.Close()
			g = nil
		}
	}()
	mod, err := dev.LoadKernels(name, src)
	if err != nil {
		return nil, err
	}
	for _, fn := range fns {
		if g.fns[fn], err = mod.Kernel(fn); err != nil {
			return nil, err
		}
	}
	ob, err := g.Alloc(backend.Int64, int64(P+1))
	if err != nil {
		return nil, err
	}
	g.offB = ob
	if err := g.Upload(g.offB, offsets); err != nil {
		return nil, err
	}
	if g.pin, err = dev.AllocPinned(uint64(8*csp.ReadWords(P)), false); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *gpuMachine) pinLen() uint64 {
	if g.pin == nil {
		return 0
	}
	return uint64(len(g.pin.Bytes()))
}

// ptr passes b to a kernel (nil: the address 0).
func ptr(b backend.Buffer) backend.Arg { return backend.Buf(b) }

// sub aliases elements [off, off+n) of b; a window outside b gives nil,
// which kernels see as the address 0.
func sub(b backend.Buffer, off, n int) backend.Buffer {
	v, err := backend.View(b, off, n)
	if err != nil {
		return nil
	}
	return v
}

func (g *gpuMachine) Alloc(dt backend.DType, n int64) (backend.Buffer, error) {
	var b backend.Buffer
	err := g.dev.Enqueue(func(l backend.Queue) error {
		var err error
		b, err = l.AllocRaw(dt, int(max(n, 1)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) Free(b backend.Buffer) { g.dev.Free(b) }

func (g *gpuMachine) View(b backend.Buffer, off, n int64) backend.Buffer {
	return sub(b, int(off), int(n))
}

func (g *gpuMachine) Upload(dst backend.Buffer, src any) error {
	return g.dev.Enqueue(func(l backend.Queue) error { return l.UploadFrom(dst, src) })
}

// Read grows the pinned buffer to the read's size first (a layer-wise
// hop reads the frontier's degrees whole; a typed hop every relation's
// header rows at once), then copies through it.
func (g *gpuMachine) Read(dst []int64, srcs []backend.Buffer, n []int64) error {
	var total int64
	for _, k := range n {
		total += k
	}
	if need := uint64(8 * max(total, 1)); g.pin == nil || uint64(len(g.pin.Bytes())) < need {
		need = max(need, 2*g.pinLen())
		if g.pin != nil {
			if err := g.pin.Free(); err != nil {
				return err
			}
			g.pin = nil
		}
		var err error
		if g.pin, err = g.dev.AllocPinned(need, false); err != nil {
			return err
		}
	}
	return g.dev.Enqueue(func(l backend.Queue) error {
		var at uint64
		for i, b := range srcs {
			w := uint64(8 * n[i])
			if at+w > uint64(len(g.pin.Bytes())) {
				return fmt.Errorf("csp: a read of %d bytes exceeds the pinned buffer", at+w)
			}
			if err := l.CopyToHost(g.pin, at, b, w); err != nil {
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

func (g *gpuMachine) Route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error {
	P := int64(g.P)
	return g.dev.Enqueue(func(l backend.Queue) error {
		if err := l.Memset(ctr, 0); err != nil {
			return err
		}
		cnt, cur := sub(ctr, 0, int(P+1)), sub(ctr, int(P+1), int(P+1))
		n := max(fcap, 1) // the scatter writes the header even for no nodes
		if err := l.Launch(g.fns["csp_route_count"], n, ptr(cnt), ptr(F), ptr(nFB), backend.Buf(g.offB), backend.I32(int32(P))); err != nil {
			return err
		}
		return l.Launch(g.fns["csp_route_scatter"], n, ptr(sendIDs), ptr(pos), ptr(cur), ptr(cnt), ptr(F), ptr(nFB),
			backend.Buf(g.offB), backend.I32(int32(P)), ptr(hdr), backend.I32(csp.HeaderWords), backend.U64(key), backend.I32(int32(hop)), backend.I32(int32(fanout)), backend.I32(int32(hops)))
	})
}

func (g *gpuMachine) DrawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		return g.st.DrawStrided(l, h, ids, R, seg, keys, ansE, ans, g.edgeBase)
	})
}

func (g *gpuMachine) UnpackStrided(ptrB, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		cnt, err := l.AllocRaw(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		defer l.Free(cnt)
		if err := l.Launch(g.fns["csp_stride_counts"], nF+1, backend.Buf(cnt), ptr(ans), ptr(pos), backend.I64(nF), backend.I32(int32(k))); err != nil {
			return err
		}
		if err := l.ScanI64(ptrB, cnt, int(nF+1)); err != nil {
			return err
		}
		var ansEP backend.Arg
		if ansE != nil {
			ansEP = ptr(ansE)
		}
		return l.Launch(g.fns["csp_stride_compact"], nF*int64(k), ptr(src), ptr(eid), ptr(ans), ansEP, ptr(ptrB), ptr(pos),
			backend.I64(nF), backend.I32(int32(k)))
	})
}

// uploadRoff copies the P+1 rank offsets roff to a new device buffer.
func (g *gpuMachine) uploadRoff(l backend.Queue, roff []int64) (backend.Buffer, error) {
	b, err := l.AllocRaw(backend.Int64, g.P+1)
	if err != nil {
		return nil, err
	}
	if err := l.UploadFrom(b, roff); err != nil {
		l.Free(b)
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) CountExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error) {
	var q, t backend.Buffer
	err = g.dev.Enqueue(func(l backend.Queue) error {
		var err error
		if q, err = g.st.CountHop(l, h, ids, R); err != nil {
			return err
		}
		roffB, err := g.uploadRoff(l, roff)
		if err != nil {
			return err
		}
		defer l.Free(roffB)
		if t, err = l.AllocRaw(backend.Int64, g.P+1); err != nil {
			return err
		}
		return l.Launch(g.fns["csp_totals"], int64(g.P+1), backend.Buf(t), backend.Buf(q), backend.Buf(roffB), backend.I32(int32(g.P)))
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

func (g *gpuMachine) DrawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		src, err := l.AllocRaw(backend.Int32, int(max(E, 1)))
		if err != nil {
			return err
		}
		defer l.Free(src)
		roffB, err := g.uploadRoff(l, roff)
		if err != nil {
			return err
		}
		defer l.Free(roffB)
		if err := g.st.DrawHop(l, h, ids, qptr, R, roff, keys, eid, src, E); err != nil {
			return err
		}
		if err := l.Launch(g.fns["csp_pack"], R, ptr(packed), ptr(qptr), backend.Buf(src), backend.Buf(roffB), backend.I32(int32(g.P)), backend.I64(R)); err != nil {
			return err
		}
		return l.Launch(g.fns["csp_add_i64"], E, ptr(eid), backend.I64(E), backend.I64(g.edgeBase))
	})
}

func (g *gpuMachine) UnpackExact(ptrB, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error {
	P := g.P
	return g.dev.Enqueue(func(l backend.Queue) error {
		var tmp []backend.Buffer
		defer func() {
			for _, b := range tmp {
				l.Free(b)
			}
		}()
		alloc := func(dt backend.DType, n int) (backend.Buffer, error) {
			b, err := l.AllocRaw(dt, max(n, 1))
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
		bptrB, SB := sub(bs, 0, P+1), sub(bs, P+1, P)
		if err := l.Launch(g.fns["csp_unpack_counts"], nF+1, backend.Buf(cnt), backend.Buf(cntS), ptr(ans),
			backend.Buf(bptrB), backend.Buf(SB), ptr(pos), backend.I32(int32(P)), backend.I64(nF)); err != nil {
			return err
		}
		if err := l.ScanI64(ptrB, cnt, int(nF+1)); err != nil {
			return err
		}
		if err := l.ScanI64(sptr, cntS, int(nF+1)); err != nil {
			return err
		}
		var eidP, ansEP backend.Arg
		if ansE != nil {
			eidP, ansEP = ptr(eid), ptr(ansE)
		} else if err := l.Memset(eid, 0xff); err != nil { // -1: not asked for
			return err
		}
		return l.Launch(g.fns["csp_unpack_src"], nF, ptr(src), eidP, ptr(ans), ansEP, ptr(ptrB),
			backend.Buf(sptr), backend.Buf(bptrB), ptr(pos), backend.I32(int32(P)), backend.I64(nF))
	})
}

func (g *gpuMachine) Relabel(F backend.Buffer, nF int64, src, ptrB backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error) {
	var a, b, c backend.Buffer
	err = g.dev.Enqueue(func(l backend.Queue) error {
		var err error
		a, b, c, err = g.st.Relabel(l, F, nF, src, ptrB, e)
		return err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return a, b, c, nil
}

// Batch wraps the parts as a gpusample.Batch: buffers truncated to the
// device's sizes, each block's structure a backend.Sparse over its buffers. On failure
// everything is freed.
func (g *gpuMachine) Batch(outs []csp.HopOut, seeds []graph.NodeID) (*csp.Batch, error) {
	L := len(outs)
	blocks := make([]gpusample.Block, L)
	var werr error
	for h := range L {
		o := &outs[h]
		if o.Sizes != nil {
			g.dev.Free(o.Sizes)
			o.Sizes = nil
		}
		blk := &blocks[L-1-h]
		if werr == nil {
			for _, t := range []struct {
				b backend.Buffer
				n int64
			}{{o.SrcNodes, o.NumSrc}, {o.Indices, o.NumEdges}, {o.EdgeIDs, o.NumEdges}} {
				if werr = backend.Truncate(t.b, int(t.n)); werr != nil {
					break
				}
			}
		}
		if werr == nil {
			var a backend.Sparse
			if a, werr = g.dev.SparseFromBuffers(int(o.NumDst), int(o.NumSrc), o.Indptr, o.Indices); werr == nil {
				blk.A = a
			}
		}
		if blk.A == nil {
			o.Free(g)
			continue
		}
		*blk = gpusample.Block{NumDst: int(o.NumDst), NumSrc: int(o.NumSrc), NumEdges: int(o.NumEdges), A: blk.A, SrcNodes: o.SrcNodes, EdgeIDs: o.EdgeIDs}
	}
	b := gpusample.NewBatch(g.dev, slices.Clone(seeds), blocks)
	if werr != nil {
		b.Free()
		return nil, werr
	}
	return &csp.Batch{Device: b}, nil
}

func (g *gpuMachine) Shrink(b backend.Buffer, n int64) (backend.Buffer, error) {
	if err := backend.Truncate(b, int(n)); err != nil {
		return nil, err
	}
	return b, nil
}

func (g *gpuMachine) Close() error {
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
