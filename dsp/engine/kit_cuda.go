package engine

// The engine's CUDA-only pieces: the full sampler on a GPU, batches in
// device memory and their hand-over between a GPU's handles (streams),
// and the deferred frees behind the trainer's stream. CPU devices never
// run this file (GPU tests do).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// gpuDevice is a back end that runs the engine's GPU paths: kernels
// compiled at run time and a queue to launch them on (the CUDA back end).
// The paths assert the further capabilities they use where they use them.
type gpuDevice interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
}

// isGPU reports whether b runs the engine's GPU paths.
func isGPU(b backend.Backend) bool {
	_, ok := b.(gpuDevice)
	return ok
}

// gpuSampler samples with gpusample over the whole graph on the device:
// it queues the batch, waits for the stream with a fence (without the
// device lock, so that stages sharing the device keep queueing work) and
// collects it.
type gpuSampler struct {
	dev   backend.Backend
	s     *gpusample.Sampler
	fence *devbuf.Fence
	m     *metrics.Counters
}

func (g *gpuSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (batch, error) {
	p, err := g.s.SampleAsync(seeds, key)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	ferr := g.fence.Record()
	if ferr == nil {
		ferr = g.fence.Wait()
	}
	b, err := p.Wait() // every Pending must be waited for
	g.m.StageSync(metrics.Sampler, time.Since(t))
	if err != nil {
		return nil, err
	}
	if ferr != nil {
		b.Free()
		return nil, ferr
	}
	return &gpuBatch{dev: g.dev, b: b}, nil
}

func (g *gpuSampler) Close() error { return errors.Join(g.s.Close(), g.fence.Close()) }

type gpuBatch struct {
	dev backend.Backend // the sampler's device
	b   *gpusample.Batch
}

func (g *gpuBatch) NumInputs() int {
	if in := g.b.InputNodes(); in != nil {
		return in.Len()
	}
	return 0
}
func (g *gpuBatch) IDs() []int32 { return nil }
func (g *gpuBatch) DeviceIDs() backend.Buffer {
	if in := g.b.InputNodes(); in != nil {
		return in
	}
	return nil
}
func (g *gpuBatch) Free() { g.b.Free() }

func (g *gpuBatch) Blocks(b backend.Backend) ([]*nn.Block, error) {
	t, ok := b.(adopter)
	if !ok || !isGPU(b) {
		return nil, fmt.Errorf("a GPU batch for a %T back end", b)
	}
	if b == g.dev {
		return g.b.NNBlocks()
	}
	return adoptBlocks(t, g.b)
}

// adopter is a back end that takes a batch over from another handle of
// its device: copies on its queue, and matrices over its own buffers.
type adopter interface {
	backend.Backend
	backend.Enqueuer
	backend.SparseBuilder
}

// adoptBlocks copies the batch's block matrices (row offsets and local
// column indices) into t's memory on t's stream and wraps them as nn
// blocks there. The sampler's device (the same GPU, another stream) has
// finished writing them: the sampler waited for its stream before handing
// the batch on.
func adoptBlocks(t adopter, b *gpusample.Batch) ([]*nn.Block, error) {
	out := make([]*nn.Block, 0, len(b.Blocks))
	fail := func(err error) ([]*nn.Block, error) {
		for _, o := range out {
			o.Free()
		}
		return nil, err
	}
	for i := range b.Blocks {
		k := &b.Blocks[i]
		if k.A == nil {
			return fail(fmt.Errorf("block %d has no matrix", i))
		}
		cs, ok := k.A.(backend.CSRBuffers)
		if !ok {
			return fail(fmt.Errorf("block %d: a %T matrix has no CSR buffers (backend.CSRBuffers)", i, k.A))
		}
		sp, sc := cs.CSR()
		if sp.Len() != k.NumDst+1 || sc.Len() != k.NumEdges {
			return fail(fmt.Errorf("block %d: %d row offsets and %d indices for %d rows and %d edges", i, sp.Len(), sc.Len(), k.NumDst, k.NumEdges))
		}
		var ptr, col backend.Buffer
		err := t.Enqueue(func(l backend.Queue) error {
			var err error
			if ptr, err = l.AllocRaw(backend.Int64, k.NumDst+1); err != nil {
				return err
			}
			if col, err = l.AllocRaw(backend.Int32, k.NumEdges); err != nil {
				l.Free(ptr)
				ptr = nil
				return err
			}
			if err := l.Copy(ptr, sp); err != nil {
				return err
			}
			if k.NumEdges > 0 {
				return l.Copy(col, sc)
			}
			return nil
		})
		if err != nil {
			if ptr != nil {
				t.Free(ptr)
				t.Free(col)
			}
			return fail(err)
		}
		a, err := t.SparseFromBuffers(k.NumDst, k.NumSrc, ptr, col)
		if err != nil {
			t.Free(ptr)
			t.Free(col)
			return fail(err)
		}
		blk, err := nn.NewBlockFromSparse(t, a)
		if err != nil {
			t.FreeSparse(a)
			return fail(err)
		}
		out = append(out, blk)
	}
	return out, nil
}

// aliasBuffer returns src, a buffer of another handle of the same GPU, as
// a buffer of b without copying (backend.Siblings.Alias).
func aliasBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(backend.Siblings)
	if !ok || !isGPU(b) || src == nil {
		return nil, fmt.Errorf("aliasing a %T into a %T", src, b)
	}
	return t.Alias(src)
}

// adoptBuffer copies src (a buffer of another handle of the same GPU,
// already written) into a new buffer of b on b's stream.
func adoptBuffer(b backend.Backend, src backend.Buffer) (backend.Buffer, error) {
	t, ok := b.(gpuDevice)
	if !ok || src == nil {
		return nil, fmt.Errorf("adopting a %T into a %T", src, b)
	}
	var dst backend.Buffer
	err := t.Enqueue(func(l backend.Queue) error {
		var err error
		if dst, err = l.AllocRaw(src.DType(), src.Len()); err != nil {
			return err
		}
		if n := src.Len() * src.DType().Size(); n > 0 {
			return l.Copy(dst, src)
		}
		return nil
	})
	if err != nil {
		if dst != nil {
			t.Free(dst)
		}
		return nil, err
	}
	return dst, nil
}

// newCUDAKit is newKit on a GPU: the samplers on spec's handles and
// package feature's store (hot rows in device memory, the table in pinned
// host memory).
func newCUDAKit(dev backend.Backend, in *graph.CSR, x []float32, rows, cols int, hot []graph.NodeID, scfg gpusample.Config, spec samplerSpec) (*kit, error) {
	workers := max(spec.workers, 1)
	if spec.layer && !spec.csp {
		return nil, errors.New("layer-wise sampling on GPUs is collective (csp)")
	}
	if len(spec.devs) != 0 && len(spec.devs) != workers || len(spec.devs) == 0 && workers > 1 {
		return nil, fmt.Errorf("%d sampler workers on %d handles", workers, len(spec.devs))
	}
	k := &kit{}
	for w := range workers {
		s, err := spec.sampler(dev, in, scfg, w, k.smps)
		if err != nil {
			k.close()
			return nil, err
		}
		k.smps = append(k.smps, s)
	}
	st, err := cache.NewCUDAStore(dev, x, rows, cols, hot)
	if err != nil {
		k.close()
		return nil, fmt.Errorf("feature store: %w", err)
	}
	k.store = st
	return k, nil
}

// sampler builds CUDA sampler worker w (dev: the trainer's handle;
// before: workers 0..w-1). Workers after the first read the first one's
// topology in place (layer-wise: their own copy).
func (spec *samplerSpec) sampler(dev backend.Backend, in *graph.CSR, scfg gpusample.Config, w int, before []sampler) (sampler, error) {
	sd := dev
	if len(spec.devs) > 0 {
		sd = spec.devs[w]
	}
	if spec.csp {
		return spec.collective(sd, scfg, w, before)
	}
	var s *gpusample.Sampler
	var err error
	if w > 0 {
		s, err = before[0].(*gpuSampler).s.Sibling(sd)
	} else {
		s, err = gpusample.New(sd, in, scfg)
	}
	if err != nil {
		return nil, fmt.Errorf("sampler %d: %w", w+1, err)
	}
	f, err := devbuf.NewFence(sd)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &gpuSampler{dev: sd, s: s, fence: f, m: spec.m}, nil
}

// deferred frees batches once the trainer's stream has run the work
// queued before them (their blocks' copies): a ring of fences, so that a
// batch is freed two steps later, when its fence has long passed.
type deferred struct {
	fences [3]*devbuf.Fence
	items  [3][]func()
	next   int
}

// add marks the trainer's stream and queues frees to run after the mark.
func (q *deferred) add(frees ...func()) error {
	i := q.next
	q.next = (i + 1) % len(q.fences)
	if q.items[i] != nil {
		if err := q.fences[i].Wait(); err != nil {
			return err
		}
		runAll(q.items[i])
		q.items[i] = nil
	}
	if err := q.fences[i].Record(); err != nil {
		return err // leaked: the run fails anyway
	}
	q.items[i] = frees
	return nil
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// drain waits for every mark and runs the frees.
func (q *deferred) drain() error {
	var first error
	for i, fs := range q.items {
		if fs == nil {
			continue
		}
		if err := q.fences[i].Wait(); err != nil && first == nil {
			first = err
		}
		runAll(fs)
		q.items[i] = nil
	}
	return first
}

func (q *deferred) close() {
	q.drain()
	for _, f := range q.fences {
		f.Close()
	}
}
