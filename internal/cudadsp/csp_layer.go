package cudadsp

import (
	_ "embed"

	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

//go:embed layer.cu
var layerSrc string

var layerKernels = []string{"lw_info", "lw_frontier_info", "lw_pack_alloc", "lw_owner_counts", "lw_owner_check", "lw_guard",
	"lw_draw_weighted", "lw_unpack"}

// Hops of the layer sampler's gpusample.Sampler: the hop API is used
// for its fanout only (keys are passed explicitly), so hop 0 counts
// whole rows and hop 1 draws a given number of edges per node without
// taking the whole row by default (fanout 1 > 0: with replacement, a
// node allotted its degree still draws with replacement, as csp does).
var layerGSFanouts = []int{-1, 1}

const layerDrawHop = 1

// gpuLayerMachine is the layer-wise machine of a CUDA device: the
// node-wise gpuMachine (buffers, routing, relabeling, reads) plus the
// rows this rank owns as layer.cu reads them. Uniform draws go through
// gpusample's hop API over the patch; weighted ones through
// lw_draw_weighted over the rows' running weight sums.
type gpuLayerMachine struct {
	*gpuMachine
	lo, rows, n       int64
	replace, weighted bool
	rowptr            backend.Buffer // rows+1 offsets into the patch's indices
	// Weighted sampling: the patch's indices, running weight sums,
	// each row's last positive-weight edge and weight sum (float64
	// bits), placed as Config.Placement says.
	indices, cum, lastpos, roww backend.Arg
	placed                      placer
	gs                          *gpusample.Sampler // the hop API, closed last
}

// newGPULayerMachine loads the kernels and places the rows of patch.
func newGPULayerMachine(dev sampleDevice, gs *gpusample.Sampler, patch *layout.Patch, offsets []int64, P int, cfg csp.Config) (*gpuLayerMachine, error) {
	st, err := gs.Stepper()
	if err != nil {
		return nil, err
	}
	gm, err := newGPUMachine(dev, st, "csp-layer", cspSrc+layerSrc, append(append([]string{}, cspKernels...), layerKernels...), P, offsets, patch.EdgeBase)
	if err != nil {
		return nil, err
	}
	g := &gpuLayerMachine{gpuMachine: gm, lo: int64(patch.Lo), rows: int64(patch.Hi - patch.Lo), n: patch.Graph.NumRows,
		replace: cfg.Replace, weighted: cfg.Weighted, placed: placer{dev: dev}}
	// g is closed on every early return: the returns name no result (a
	// named one would be nil by the time a deferred cleanup ran).
	built := false
	defer func() {
		if !built {
			g.Close()
		}
	}()
	pg := patch.Graph
	lo, hi := int64(patch.Lo), int64(patch.Hi)
	rb, err := gm.Alloc(backend.Int64, g.rows+1)
	if err != nil {
		return nil, err
	}
	g.rowptr = rb
	if err := gm.Upload(g.rowptr, pg.Indptr[lo:hi+1]); err != nil {
		return nil, err
	}
	if !cfg.Weighted {
		built = true
		return g, nil
	}
	// Per-row arrays follow the placement's rows (on the device unless
	// Mapped); per-edge ones its adjacency (in host memory with Mapped
	// and Split: this copy is not split by row).
	rw, cum, last := csp.LayerWeights(pg.Indptr[lo:hi+1], pg.Weights)
	edges, rowsAt := mappedEdges(cfg.Placement), cfg.Placement == gpusample.Mapped
	for _, a := range []struct {
		dst    *backend.Arg
		data   any
		mapped bool
	}{{&g.indices, pg.Indices, edges}, {&g.cum, cum, edges}, {&g.lastpos, last, rowsAt}, {&g.roww, rw, rowsAt}} {
		if *a.dst, err = g.placed.place(a.data, a.mapped); err != nil {
			return nil, err
		}
	}
	built = true
	return g, nil
}

func (g *gpuLayerMachine) Info(ids backend.Buffer, R int64, out, bad backend.Buffer) error {
	w := int32(1)
	if g.weighted {
		w = 2
	}
	return g.dev.Enqueue(func(l backend.Queue) error {
		return l.Launch(g.fns["lw_info"], R, ptr(out), ptr(bad), ptr(ids), backend.I64(R), backend.Buf(g.rowptr), g.roww,
			backend.I64(g.lo), backend.I64(g.rows), backend.I32(w))
	})
}

// upload64 queues the upload of small host words to a new buffer, which
// the caller frees (after the work using it is queued).
func upload64(l backend.Queue, words []int64) (backend.Buffer, error) {
	b, err := l.AllocRaw(backend.Int64, max(len(words), 1))
	if err != nil {
		return nil, err
	}
	if err := l.UploadFrom(b, words); err != nil {
		l.Free(b)
		return nil, err
	}
	return b, nil
}

func (g *gpuLayerMachine) FrontierInfo(out, in, pos backend.Buffer, bptr []int64, nF int64) error {
	w := int32(1)
	if g.weighted {
		w = 2
	}
	return g.dev.Enqueue(func(l backend.Queue) error {
		bb, err := upload64(l, bptr)
		if err != nil {
			return err
		}
		defer l.Free(bb)
		return l.Launch(g.fns["lw_frontier_info"], nF, ptr(out), ptr(in), ptr(pos), backend.Buf(bb), backend.I32(int32(g.P)), backend.I64(nF), backend.I32(w))
	})
}

func (g *gpuLayerMachine) PackAlloc(allocG, msg, allocF, pos backend.Buffer, bptr, hdr []int64, nF int64) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		bh, err := upload64(l, append(append(make([]int64, 0, len(bptr)+len(hdr)), bptr...), hdr...))
		if err != nil {
			return err
		}
		defer l.Free(bh)
		P := g.P
		return l.Launch(g.fns["lw_pack_alloc"], nF+1+int64(P), ptr(allocG), ptr(msg), ptr(allocF), ptr(pos),
			backend.Buf(bh), backend.Buf(sub(bh, P+1, 2*P)), backend.I32(int32(P)), backend.I64(nF))
	})
}

func (g *gpuLayerMachine) DrawLayer(ids, info, msg backend.Buffer, R int64, roff, tot []int64, keys []uint64, src, eid backend.Buffer, E int64, bad backend.Buffer) error {
	w, P := int32(1), g.P
	if g.weighted {
		w = 2
	}
	return g.dev.Enqueue(func(l backend.Queue) error {
		// roff, then tot, then the keys (as seg for lw_draw_weighted:
		// roff followed by the keys is its seg argument).
		words := make([]int64, 0, 3*P+1)
		words = append(words, roff...)
		for _, k := range keys {
			words = append(words, int64(k))
		}
		words = append(words, tot...)
		wb, err := upload64(l, words)
		if err != nil {
			return err
		}
		defer l.Free(wb)
		roffB, segB, totB := sub(wb, 0, P+1), sub(wb, 0, 2*P+1), sub(wb, 2*P+1, P)
		cnt, err := l.AllocRaw(backend.Int64, int(R+1))
		if err != nil {
			return err
		}
		defer l.Free(cnt)
		qptr, err := l.AllocRaw(backend.Int64, int(R+1))
		if err != nil {
			return err
		}
		defer l.Free(qptr)
		if err := l.Launch(g.fns["lw_owner_counts"], R+1, backend.Buf(cnt), ptr(bad), ptr(msg), ptr(info), backend.Buf(roffB),
			backend.I32(int32(P)), backend.I64(R), backend.I32(w), backend.I32(b2i(g.replace)), backend.I64(csp.MaxLayerFanout)); err != nil {
			return err
		}
		if err := l.ScanI64(qptr, cnt, int(R+1)); err != nil {
			return err
		}
		if err := l.Launch(g.fns["lw_owner_check"], int64(P), ptr(bad), backend.Buf(qptr), backend.Buf(roffB), backend.Buf(totB), backend.I32(int32(P))); err != nil {
			return err
		}
		if err := l.Launch(g.fns["lw_guard"], R+1, backend.Buf(qptr), ptr(bad), backend.I64(R)); err != nil {
			return err
		}
		if err := l.Memset(src, 0xff); err != nil {
			return err
		}
		if err := l.Memset(eid, 0xff); err != nil {
			return err
		}
		if g.weighted {
			return l.Launch(g.fns["lw_draw_weighted"], E, ptr(src), ptr(eid), ptr(ids), backend.Buf(qptr), backend.I64(R), backend.Buf(segB),
				backend.I32(int32(P)), backend.Buf(g.rowptr), g.indices, g.cum, g.lastpos, backend.I64(g.lo),
				backend.I64(g.edgeBase), backend.I64(E))
		}
		if R == 0 {
			return nil
		}
		if err := g.st.DrawHop(l, layerDrawHop, ids, qptr, R, roff, keys, eid, src, E); err != nil {
			return err
		}
		return l.Launch(g.fns["csp_add_i64"], E, ptr(eid), backend.I64(E), backend.I64(g.edgeBase))
	})
}

func (g *gpuLayerMachine) UnpackLayer(src, eid, ans, ansE, ptrB, allocG, pos backend.Buffer, nF, E int64, bad backend.Buffer) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		sptr, err := l.AllocRaw(backend.Int64, int(nF+1))
		if err != nil {
			return err
		}
		defer l.Free(sptr)
		if err := l.ScanI64(sptr, allocG, int(nF+1)); err != nil {
			return err
		}
		var ansEP backend.Arg // 0: the kernel writes -1
		if ansE != nil {
			ansEP = ptr(ansE)
		}
		return l.Launch(g.fns["lw_unpack"], E, ptr(src), ptr(eid), ptr(bad), ptr(ans), ansEP, ptr(ptrB), backend.Buf(sptr), ptr(pos),
			backend.I64(nF), backend.I64(E), backend.I64(g.n))
	})
}

func (g *gpuLayerMachine) Close() error {
	if g.rowptr != nil {
		g.dev.Free(g.rowptr)
		g.rowptr = nil
	}
	first := g.gpuMachine.Close()
	if err := g.placed.free(); first == nil {
		first = err
	}
	if g.gs != nil {
		if err := g.gs.Close(); first == nil {
			first = err
		}
		g.gs = nil
	}
	return first
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
