package gpusample

import (
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// This file is the package's last CUDA-typed surface, kept only while
// dsp/csp and dsp/engine (being moved) read Block.A as a *cuda.Sparse
// (Indptr().Ptr() for their copies), pass InputNodes to code that takes a
// *cuda.Buffer and keep CountHop's and Relabel's results in *cuda.Buffer
// variables. Everything else in the package uses the capabilities of
// package backend. Once they use backend types (backend.CSRBuffers and
// Queue.Copy for the copies), Block.A becomes a backend.Sparse,
// InputNodes, CountHop and Relabel return backend.Buffers (countHop and
// relabel are those), and this file goes away.

// Block is one hop's message-flow graph in device memory. A (rows =
// destinations, columns = sources, local ids) is a back-end Sparse ready
// for SpMM; SrcNodes holds the sources' global ids (destinations first).
type Block struct {
	NumDst, NumSrc, NumEdges int
	A                        *cuda.Sparse   // NumDst x NumSrc
	SrcNodes                 backend.Buffer // int32, NumSrc
	EdgeIDs                  backend.Buffer // int64, NumEdges: positions in the graph's indices
}

// blockMatrix is a block's matrix as Block.A holds it (nil for a matrix
// of another back end, which the sampler's device never makes).
func blockMatrix(a backend.Sparse) *cuda.Sparse {
	c, _ := a.(*cuda.Sparse)
	return c
}

// InputNodes returns the device buffer of nodes whose features the first
// layer reads.
func (b *Batch) InputNodes() *cuda.Buffer {
	c, _ := b.Blocks[0].SrcNodes.(*cuda.Buffer)
	return c
}

// CountHop queues, for the n nodes of dst (int32, global ids), the number
// of edges each yields at hop h and their exclusive scan: ptr (new,
// int64, n+1 entries; ptr[n] is the hop's edge count, to be read by the
// caller).
func (t *Stepper) CountHop(q backend.Queue, h int, dst backend.Buffer, n int64) (*cuda.Buffer, error) {
	ptr, err := t.countHop(q, h, dst, n)
	if err != nil {
		return nil, err
	}
	cs, err := cudaBufs(q, ptr)
	if err != nil {
		return nil, err
	}
	return cs[0], nil
}

// Relabel queues the deduplication of the hop [dst[0:nd), src[0:e)]
// (ptr: nd+1 row offsets into src) exactly as SampleDevice does:
// destinations keep ids 0..nd-1, new sources follow in first-seen order.
// It returns srcNodes (int32, nd+e entries, the first numSrc valid),
// local (int32, max(e,1) entries: the block's column indices) and sizes
// (int64 {nd, e, numSrc} on the device, for the caller to read).
func (t *Stepper) Relabel(q backend.Queue, dst backend.Buffer, nd int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes *cuda.Buffer, err error) {
	a, b, c, err := t.relabel(q, dst, nd, src, ptr, e)
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := cudaBufs(q, a, b, c)
	if err != nil {
		return nil, nil, nil, err
	}
	return cs[0], cs[1], cs[2], nil
}

// cudaBufs returns bs as CUDA buffers, or frees them all and fails.
func cudaBufs(q backend.Queue, bs ...backend.Buffer) ([]*cuda.Buffer, error) {
	cs := make([]*cuda.Buffer, len(bs))
	for i, b := range bs {
		c, ok := b.(*cuda.Buffer)
		if !ok {
			for _, b := range bs {
				q.Free(b)
			}
			return nil, hopErr("queue", "a %T buffer where the hop API still returns CUDA buffers", b)
		}
		cs[i] = c
	}
	return cs, nil
}
