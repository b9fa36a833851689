package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// DefaultBucketBytes is the default gradient bucket capacity (10 MB, as
// MegEngine's ParamPack and PyTorch DDP's default of 25 MB in spirit).
const DefaultBucketBytes = 10 << 20

// BucketOptions configure a Bucketer.
type BucketOptions struct {
	// BucketBytes is a bucket's capacity (DefaultBucketBytes if 0). A
	// gradient larger than it gets a bucket of its own.
	BucketBytes int
	// Op combines the ranks' gradients: Mean (the default) or Sum.
	Op ReduceOp
	// NoOverlap reduces every bucket in Wait instead of as soon as it is
	// full (the default when the back end's Caps().Overlap is false).
	NoOverlap bool
}

// Bucketer packs float32 gradients into buckets and all-reduces each
// bucket as soon as backward has produced every gradient in it, on a
// background goroutine, so communication overlaps the rest of backward.
// Parameters are assigned to buckets in reverse order (backward produces
// the last layers first) and buckets are reduced strictly in index order,
// so every rank issues the same collectives in the same order whatever
// order its gradients arrive in. Bucket memory comes from Comm.Alloc (on
// shm, the shared heap: reductions run in place).
//
// Per step: call Ready for each gradient (from any goroutine), then Wait;
// Wait writes the reduced values back into the slices given to Ready.
// Gradients not given to Ready in a step count as zeros (a parameter
// unused on this rank). While a step is in flight the Bucketer's
// communicator must not be used by others (or only through a
// Coordinator).
type Bucketer struct {
	c       Comm
	op      ReduceOp
	overlap bool
	sizes   []int
	bucket  []int // parameter -> bucket
	offset  []int // parameter -> offset in its bucket
	buckets []*gradBucket

	mu      sync.Mutex
	grads   [][]float32 // this step's gradients, by parameter
	next    int         // next bucket to launch
	err     error
	pending sync.WaitGroup
	jobs    chan bucketJob
	closed  bool
}

type gradBucket struct {
	buf     backend.Buffer
	data    []float32
	params  []int
	missing int // parameters not yet ready this step
}

type bucketJob struct {
	ctx context.Context
	b   int
}

// NewBucketer assigns parameters of the given sizes (elements) to buckets.
func NewBucketer(c Comm, sizes []int, o BucketOptions) (*Bucketer, error) {
	capBytes := o.BucketBytes
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 4 {
		return nil, fmt.Errorf("comm: bucket capacity %d bytes", capBytes)
	}
	op := o.Op
	if op == 0 {
		op = Mean
	}
	if op != Mean && op != Sum {
		return nil, fmt.Errorf("comm: bucket reduction %v, want mean or sum", op)
	}
	b := &Bucketer{c: c, op: op, overlap: !o.NoOverlap && c.Caps().Overlap, sizes: append([]int(nil), sizes...),
		bucket: make([]int, len(sizes)), offset: make([]int, len(sizes)), grads: make([][]float32, len(sizes))}
	capElems := capBytes / 4
	var cur []int
	fill := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		buf, err := c.Alloc(backend.Float32, fill)
		if err != nil {
			return err
		}
		data := cpu.F32(buf)
		if data == nil && fill > 0 {
			c.Free(buf)
			return fmt.Errorf("comm: gradient buckets need host memory; the %s communicator allocates %T buffers", c.Kind(), buf)
		}
		g := &gradBucket{buf: buf, data: data, params: cur}
		for _, p := range cur {
			b.bucket[p] = len(b.buckets)
		}
		b.buckets = append(b.buckets, g)
		cur, fill = nil, 0
		return nil
	}
	for p := len(sizes) - 1; p >= 0; p-- {
		n := sizes[p]
		if n < 0 || n > maxAlloc {
			b.Close()
			return nil, fmt.Errorf("comm: parameter %d has %d elements", p, n)
		}
		if fill > 0 && fill+n > capElems {
			if err := flush(); err != nil {
				b.Close()
				return nil, err
			}
		}
		b.offset[p] = fill
		cur = append(cur, p)
		fill += n
	}
	if err := flush(); err != nil {
		b.Close()
		return nil, err
	}
	b.reset()
	if b.overlap {
		b.jobs = make(chan bucketJob, len(b.buckets))
		go b.worker()
	}
	return b, nil
}

// Buckets lists each bucket's parameters, in reduction order.
func (b *Bucketer) Buckets() [][]int {
	out := make([][]int, len(b.buckets))
	for i, g := range b.buckets {
		out[i] = append([]int(nil), g.params...)
	}
	return out
}

func (b *Bucketer) reset() {
	for _, g := range b.buckets {
		g.missing = len(g.params)
	}
	clear(b.grads)
	b.next = 0
	b.err = nil
}

// Ready hands over parameter i's gradient for this step. It is copied
// into its bucket; grad receives the reduced value in Wait, so keep it.
func (b *Bucketer) Ready(ctx context.Context, i int, grad []float32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if i < 0 || i >= len(b.sizes) {
		return fmt.Errorf("comm: Bucketer.Ready: parameter %d out of range [0, %d)", i, len(b.sizes))
	}
	if len(grad) != b.sizes[i] {
		return fmt.Errorf("comm: Bucketer.Ready: parameter %d has %d elements, got %d", i, b.sizes[i], len(grad))
	}
	if b.grads[i] != nil {
		return fmt.Errorf("comm: Bucketer.Ready: parameter %d given twice in one step", i)
	}
	g := b.buckets[b.bucket[i]]
	copy(g.data[b.offset[i]:], grad)
	b.grads[i] = grad
	if len(grad) == 0 {
		b.grads[i] = []float32{}
	}
	g.missing--
	b.launchReady(ctx)
	return b.err
}

// launchReady launches full buckets in index order (caller holds mu).
func (b *Bucketer) launchReady(ctx context.Context) {
	for b.next < len(b.buckets) && b.buckets[b.next].missing == 0 {
		if b.overlap {
			b.pending.Add(1)
			b.jobs <- bucketJob{ctx: context.WithoutCancel(ctx), b: b.next}
		}
		b.next++
	}
}

func (b *Bucketer) worker() {
	for j := range b.jobs {
		b.mu.Lock()
		failed := b.err != nil
		b.mu.Unlock()
		if !failed {
			if err := b.reduce(j.ctx, j.b); err != nil {
				b.mu.Lock()
				if b.err == nil {
					b.err = err
				}
				b.mu.Unlock()
			}
		}
		b.pending.Done()
	}
}

func (b *Bucketer) reduce(ctx context.Context, i int) error {
	if err := b.c.AllReduce(ctx, b.buckets[i].buf, b.op); err != nil {
		return fmt.Errorf("comm: gradient bucket %d: %w", i, err)
	}
	return nil
}

// Wait finishes the step: gradients never given to Ready count as zeros,
// remaining buckets are reduced, and the results are written back into
// the gradients given to Ready (Result gives every parameter's). It
// returns the first failure.
func (b *Bucketer) Wait(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	for p, g := range b.grads {
		if g == nil {
			bk := b.buckets[b.bucket[p]]
			clear(bk.data[b.offset[p] : b.offset[p]+b.sizes[p]])
			bk.missing--
		}
	}
	b.launchReady(ctx)
	b.mu.Unlock()
	b.pending.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.err
	if !b.overlap && err == nil {
		for i := range b.buckets {
			if err = b.reduce(ctx, i); err != nil {
				break
			}
		}
	}
	if err == nil {
		for p, g := range b.grads {
			if len(g) > 0 {
				copy(g, b.Result(p))
			}
		}
	}
	b.reset()
	return err
}

// Result is parameter i's reduced gradient after Wait (a view of bucket
// memory, valid until the next Ready).
func (b *Bucketer) Result(i int) []float32 {
	o := b.offset[i]
	return b.buckets[b.bucket[i]].data[o : o+b.sizes[i] : o+b.sizes[i]]
}

// Close releases the buckets. The communicator stays open.
func (b *Bucketer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	jobs := b.jobs
	b.mu.Unlock()
	b.pending.Wait()
	if jobs != nil {
		close(jobs)
	}
	var err error
	for _, g := range b.buckets {
		err = errors.Join(err, b.c.Free(g.buf))
	}
	return err
}
