package cudadsp

import (
	_ "embed"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

//go:embed walk.cu
var walkSrc string

var walkKernels = []string{"wk_init", "wk_pack", "wk_step", "wk_scatter"}

// gpuWalkMachine is the walk machine of a CUDA device: the node-wise
// gpuMachine (buffers, routing, reads), the identity offsets that route
// traces to their origins, and the rows this rank owns.
type gpuWalkMachine struct {
	*gpuMachine
	idOff   backend.Buffer // 0, 1, ..., P
	length  int
	lo, n   int64
	rows    int64
	rowptr  backend.Arg // rows+1 offsets into indices
	indices backend.Arg // the patch's column indices
	placed  placer
}

func newGPUWalkMachine(dev sampleDevice, patch *layout.Patch, offsets []int64, P, length int, placement gpusample.Placement) (*gpuWalkMachine, error) {
	gm, err := newGPUMachine(dev, nil, "csp-walk", cspSrc+walkSrc, append(append([]string{}, cspKernels...), walkKernels...), P, offsets, patch.EdgeBase)
	if err != nil {
		return nil, err
	}
	g := &gpuWalkMachine{gpuMachine: gm, length: length, lo: int64(patch.Lo), rows: int64(patch.Hi - patch.Lo), n: patch.Graph.NumRows, placed: placer{dev: dev}}
	// g is closed on every early return: the returns name no result (a
	// named one would be nil by the time a deferred cleanup ran).
	built := false
	defer func() {
		if !built {
			g.Close()
		}
	}()
	id := make([]int64, P+1)
	for i := range id {
		id[i] = int64(i)
	}
	b, err := gm.Alloc(backend.Int64, int64(P+1))
	if err != nil {
		return nil, err
	}
	g.idOff = b
	if err := gm.Upload(b, id); err != nil {
		return nil, err
	}
	pg := patch.Graph
	if g.rowptr, err = g.placed.place(pg.Indptr[patch.Lo:patch.Hi+1], placement == gpusample.Mapped); err != nil {
		return nil, err
	}
	if g.indices, err = g.placed.place(pg.Indices, mappedEdges(placement)); err != nil {
		return nil, err
	}
	built = true
	return g, nil
}

func (g *gpuWalkMachine) RouteOrigins(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, hop, fanout, hops int) error {
	saved := g.offB
	g.offB = g.idOff
	defer func() { g.offB = saved }()
	return g.Route(hdr, sendIDs, pos, F, nFB, ctr, fcap, 0, hop, fanout, hops)
}

func (g *gpuWalkMachine) InitWalks(out, starts backend.Buffer, n int64, L int) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		return l.Launch(g.fns["wk_init"], n*int64(L+1), ptr(out), ptr(starts), backend.I64(n), backend.I32(int32(L)))
	})
}

func (g *gpuWalkMachine) Pack(dst, src, pos backend.Buffer, n int64, w int) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		return l.Launch(g.fns["wk_pack"], n*int64(w), ptr(dst), ptr(src), ptr(pos), backend.I64(n), backend.I32(int32(w)))
	})
}

func (g *gpuWalkMachine) Step(t int, recv backend.Buffer, R int64, rec, F, trO, trR, bad backend.Buffer) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		return l.Launch(g.fns["wk_step"], R, ptr(rec), ptr(F), ptr(trO), ptr(trR), ptr(bad), ptr(recv), backend.I64(R), backend.I32(int32(t)),
			backend.I32(int32(g.length)), backend.I32(int32(g.P)), g.rowptr, g.indices, backend.I64(g.lo), backend.I64(g.rows))
	})
}

func (g *gpuWalkMachine) Concat(dst backend.Buffer, srcs []backend.Buffer, n []int64) error {
	var at int64
	for i, s := range srcs {
		if n[i] > 0 {
			if err := g.dev.Copy(g.View(dst, at, n[i]), g.View(s, 0, n[i])); err != nil {
				return err
			}
		}
		at += n[i]
	}
	return nil
}

func (g *gpuWalkMachine) Scatter(out, recv backend.Buffer, m, n int64, L int, bad backend.Buffer) error {
	return g.dev.Enqueue(func(l backend.Queue) error {
		return l.Launch(g.fns["wk_scatter"], m, ptr(out), ptr(bad), ptr(recv), backend.I64(m), backend.I64(n), backend.I32(int32(L)), backend.I64(g.n))
	})
}

func (g *gpuWalkMachine) Close() error {
	if g.idOff != nil {
		g.dev.Free(g.idOff)
		g.idOff = nil
	}
	first := g.gpuMachine.Close()
	if err := g.placed.free(); first == nil {
		first = err
	}
	return first
}
