package cudadsp

import (
	_ "embed"
	"fmt"
	"unsafe"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

var (
	_ cache.NodeOrderTabler = (*Store)(nil)
	_ cache.CachedTabler    = (*Store)(nil)
	_ cache.BF16Gatherer    = (*Store)(nil)
)

//go:embed route.cu
var routeSrc string

var routeKernels = []string{"gc_route_count", "gc_route_scatter", "gc_scatter_rows", "gc_scatter_rows4", "gc_scatter_rows_bf16", "gc_scatter_rows_bf16x8"}

func init() { cache.RegisterDevice(newRouteMachine) }

// routeDevice is what the routing kernels need of a back end: run-time
// kernels, its queue, pinned host memory and fences (the CUDA back end).
type routeDevice interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
	backend.Fences
}

// newRouteMachine is cache's device machine: the routing kernels on the
// back ends with routeDevice's capabilities (nil, nil on any other).
func newRouteMachine(be backend.Backend, holder []int8, k, rank, rows int) (cache.Machine, error) {
	dev, ok := be.(routeDevice)
	if !ok {
		return nil, nil
	}
	m, err := newCUDAMachine(dev, holder, k, rank, rows)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// cudaMachine runs the routing kernels (route.cu) on the loader's GPU
// handle: the holder table lives in device memory (a byte per node), the
// counts are written by the device and read back once per batch through a
// pinned buffer, waited for with a fence (without the device lock).
type cudaMachine struct {
	dev           routeDevice
	fns           map[string]backend.Kernel
	holder        backend.Buffer // int8 per node, packed in int32 words
	ctr           backend.Buffer // k+2 counts, then k slot cursors (int64)
	pin           backend.HostBuffer
	fence         backend.Fence
	k, rank, rows int
	routed        bool
}

func newCUDAMachine(dev routeDevice, holder []int8, k, rank, rows int) (*cudaMachine, error) {
	if k+2 > 160 {
		return nil, fmt.Errorf("%w: %d devices, the routing kernels handle at most 158", cache.ErrInput, k)
	}
	m := &cudaMachine{dev: dev, fns: map[string]backend.Kernel{}, k: k, rank: rank, rows: rows}
	mod, err := dev.LoadKernels("cache", routeSrc)
	if err != nil {
		return nil, fmt.Errorf("cache: routing kernels: %w", err)
	}
	for _, name := range routeKernels {
		if m.fns[name], err = mod.Kernel(name); err != nil {
			return nil, err
		}
	}
	words := make([]int32, max((len(holder)+3)/4, 1))
	if len(holder) > 0 {
		copy(unsafe.Slice((*int8)(unsafe.Pointer(&words[0])), 4*len(words)), holder)
	}
	fail := func(err error) (*cudaMachine, error) {
		m.Close()
		return nil, err
	}
	err = dev.Enqueue(func(q backend.Queue) error {
		var err error
		if m.holder, err = q.AllocRaw(backend.Int32, len(words)); err != nil {
			return err
		}
		if err := q.UploadFrom(m.holder, words); err != nil {
			return err
		}
		m.ctr, err = q.AllocRaw(backend.Int64, 2*k+2)
		return err
	})
	if err != nil {
		return fail(err)
	}
	if m.pin, err = dev.AllocPinned(uint64(8*(k+2)), false); err != nil {
		return fail(err)
	}
	if m.fence, err = dev.NewFence(); err != nil {
		return fail(err)
	}
	return m, nil
}

// cbuf requires b to be a buffer; the queue refuses buffers of another
// device (a *backend.ShapeError from Launch).
func (m *cudaMachine) cbuf(b backend.Buffer) (backend.Buffer, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: a nil buffer where a buffer of %s is needed", cache.ErrInput, m.dev.Name())
	}
	return b, nil
}

func (m *cudaMachine) Route(ids backend.Buffer, n int, grouped, pos backend.Buffer) error {
	m.routed = false
	in, err := m.cbuf(ids)
	if err != nil {
		return err
	}
	if in.DType() != backend.Int32 || n > in.Len() {
		return fmt.Errorf("%w: routing %d IDs from a %v buffer of %d", cache.ErrInput, n, in.DType(), in.Len())
	}
	var g, p backend.Buffer
	if grouped != nil {
		if g, err = m.cbuf(grouped); err != nil {
			return err
		}
		if p, err = m.cbuf(pos); err != nil {
			return err
		}
		if g.Len() < n || p.Len() < n {
			return fmt.Errorf("%w: grouping %d IDs into buffers of %d and %d", cache.ErrInput, n, g.Len(), p.Len())
		}
	}
	k := m.k
	cnt, err := backend.View(m.ctr, 0, k+2)
	if err != nil {
		return err
	}
	cur, err := backend.View(m.ctr, k+2, k)
	if err != nil {
		return err
	}
	err = m.dev.Enqueue(func(q backend.Queue) error {
		if err := q.Memset(m.ctr, 0); err != nil {
			return err
		}
		args := []backend.Arg{backend.Buf(in), backend.I64(int64(n)), backend.Buf(m.holder), backend.I64(int64(m.rows)), backend.I32(int32(k)), backend.I32(int32(m.rank))}
		if n > 0 {
			if err := q.Launch(m.fns["gc_route_count"], int64(n), append([]backend.Arg{backend.Buf(cnt)}, args...)...); err != nil {
				return err
			}
			if g != nil {
				if err := q.Launch(m.fns["gc_route_scatter"], int64(n),
					append([]backend.Arg{backend.Buf(g), backend.Buf(p), backend.Buf(cur), backend.Buf(cnt)}, args...)...); err != nil {
					return err
				}
			}
		}
		return q.CopyToHost(m.pin, 0, cnt, uint64(8*(k+2)))
	})
	if err != nil {
		return err
	}
	m.routed = true
	return nil
}

func (m *cudaMachine) Counts() ([]int64, error) {
	if !m.routed {
		return nil, fmt.Errorf("cache: counts before a route")
	}
	if err := m.fence.Record(); err != nil {
		return nil, err
	}
	if err := m.fence.Wait(); err != nil {
		return nil, err
	}
	out := make([]int64, m.k+2)
	copy(out, m.pin.Int64s())
	return out, nil
}

func (m *cudaMachine) Scatter(x, stage, pos backend.Buffer, n, cols int, p float32, seed uint64) error {
	if n == 0 {
		return nil
	}
	if err := backend.CheckDropoutRate("cache.Scatter", p); err != nil {
		return err
	}
	keep := float32(1)
	if p != 0 {
		keep = 1 / (1 - p) // float32, as backend.Dropout computes it
	}
	xb, err := m.cbuf(x)
	if err != nil {
		return err
	}
	sb, err := m.cbuf(stage)
	if err != nil {
		return err
	}
	pb, err := m.cbuf(pos)
	if err != nil {
		return err
	}
	if sb.Len() < n*cols || pb.Len() < n || xb.Len() < n*cols {
		return fmt.Errorf("%w: scatter of %d rows x %d from %d values and %d positions into %d", cache.ErrInput, n, cols, sb.Len(), pb.Len(), xb.Len())
	}
	if dt := xb.DType(); (dt != backend.Float32 && dt != backend.BFloat16) || sb.DType() != backend.Float32 {
		return fmt.Errorf("%w: scatter of %s rows into a %s buffer, want float32 into float32 or bfloat16", cache.ErrInput, sb.DType(), dt)
	}
	if xb.DType() == backend.BFloat16 {
		// bfloat16 rows (cache.LoaderConfig.BFloat16Rows): rounded
		// as they are written, 8 values a thread where they line up.
		return m.dev.Enqueue(func(q backend.Queue) error {
			if cols%8 == 0 && q.Aligned(xb, 16) && q.Aligned(sb, 16) {
				return q.Launch(m.fns["gc_scatter_rows_bf16x8"], int64(n)*int64(cols/8), backend.Buf(xb), backend.Buf(sb), backend.Buf(pb),
					backend.I64(int64(n)), backend.I64(int64(cols/8)), backend.F32(p), backend.F32(keep), backend.U64(seed))
			}
			return q.Launch(m.fns["gc_scatter_rows_bf16"], int64(n)*int64(cols), backend.Buf(xb), backend.Buf(sb), backend.Buf(pb),
				backend.I64(int64(n)), backend.I64(int64(cols)), backend.F32(p), backend.F32(keep), backend.U64(seed))
		})
	}
	return m.dev.Enqueue(func(q backend.Queue) error {
		if cols%4 == 0 && q.Aligned(xb, 16) && q.Aligned(sb, 16) {
			return q.Launch(m.fns["gc_scatter_rows4"], int64(n)*int64(cols/4), backend.Buf(xb), backend.Buf(sb), backend.Buf(pb),
				backend.I64(int64(n)), backend.I64(int64(cols/4)), backend.F32(p), backend.F32(keep), backend.U64(seed))
		}
		return q.Launch(m.fns["gc_scatter_rows"], int64(n)*int64(cols), backend.Buf(xb), backend.Buf(sb), backend.Buf(pb),
			backend.I64(int64(n)), backend.I64(int64(cols)), backend.F32(p), backend.F32(keep), backend.U64(seed))
	})
}

func (m *cudaMachine) Close() error {
	var err error
	if m.holder != nil {
		m.dev.Free(m.holder)
		m.holder = nil
	}
	if m.ctr != nil {
		m.dev.Free(m.ctr)
		m.ctr = nil
	}
	if m.pin != nil {
		err = m.pin.Free()
		m.pin = nil
	}
	if m.fence != nil {
		if e := m.fence.Close(); err == nil {
			err = e
		}
		m.fence = nil
	}
	return err
}

// Store is a cache.Store on a GPU (package feature): hot rows in device
// memory, the whole table in mapped pinned host memory for the rest
// (read through UVA).
type Store struct {
	s *feature.Store
}

// NewStore copies the rows x cols table x into pinned host memory and
// the rows of hot (in order: hot[i] is cache row i) into dev's memory,
// as bfloat16 when dev's precision is BF16 (cache.ValueBytes); when hot
// lists every row, the table goes to the device as it is and no pinned
// copy is made (feature.New). With onlyHot (peers cache every other
// row) no pinned copy is made either, and only hot rows may be
// gathered (feature.Options.NoHost). onUpload (may be nil) is told of
// every chunk of rows copied to the device.
func NewStore(dev backend.Backend, x []float32, rows, cols int, hot []graph.NodeID, onlyHot bool, onUpload func(bytes int64)) (*Store, error) {
	vb := cache.ValueBytes(dev.Precision())
	var budget int64
	if len(hot) > 0 {
		// The slot table (4 bytes a node) plus exactly the hot rows.
		budget = 4*int64(rows) + vb*int64(len(hot))*int64(cols)
	}
	s, err := feature.New(dev, x, rows, cols, feature.Options{BudgetBytes: budget, Hot: hot, BFloat16: vb == 2, NoHost: onlyHot, OnUpload: onUpload})
	if err != nil {
		return nil, err
	}
	if s.HotRows() != len(hot) {
		s.Close()
		return nil, fmt.Errorf("cudadsp: feature store holds %d hot rows, want %d", s.HotRows(), len(hot))
	}
	return &Store{s: s}, nil
}

// Gather queues the gather of nodes' rows into dst (both on the store's
// device).
func (c *Store) Gather(dst, nodes backend.Buffer) error {
	return c.s.Gather(dst, nodes)
}

// GatherDropout is Gather with input dropout applied in the gather
// kernels (feature.Store.GatherDropout: backend.Dropout's mask rule).
func (c *Store) GatherDropout(dst, nodes backend.Buffer, p float32, seed uint64) error {
	return c.s.GatherDropout(dst, nodes, p, seed)
}

// GathersBF16 reports whether Gather and GatherDropout also write
// bfloat16 rows (cache.BF16Gatherer): a store of a bfloat16 table
// (feature.Store.Gather's bfloat16 dst).
func (c *Store) GathersBF16() bool { return c.s.BFloat16() }

// NodeOrderTable is the feature store's whole table on the device, when
// it holds every row in node order at float32 (cache.NodeOrderTabler).
func (c *Store) NodeOrderTable() (backend.Buffer, bool) { return c.s.NodeOrderTable() }

// CachedTable is the feature store's hot rows on the device, in cache
// order, when it caches some rows but not all at float32
// (cache.CachedTabler).
func (c *Store) CachedTable() (backend.Buffer, bool) { return c.s.CachedTable() }

func (c *Store) HotRows() int       { return c.s.HotRows() }
func (c *Store) DeviceBytes() int64 { return c.s.DeviceBytes() }
func (c *Store) Close() error       { return c.s.Close() }
