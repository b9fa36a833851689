package feature

import (
	_ "embed"
	"fmt"
	"slices"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

//go:embed gather.cu
var kernelSrc string

// Options configure a Store.
type Options struct {
	// BudgetBytes is the device memory the store may use: the slot table
	// (4 bytes per node) plus as many hot rows as fit. 0 keeps every row
	// in host memory.
	BudgetBytes int64
	// Hot lists nodes hottest first (nil: node order). Nodes not listed
	// are never hot.
	Hot []graph.NodeID
	// BFloat16 keeps the table (host and hot rows) as bfloat16, rounded
	// to nearest even (backend.BF16Bits): half the memory and half the
	// bytes a gather reads; Gather widens the rows to float32 exactly.
	BFloat16 bool
}

// Store gathers feature rows on one GPU. It is safe for concurrent use.
type Store struct {
	dev        backend.Backend
	queue      backend.Enqueuer
	rows, cols int
	host       backend.HostBuffer // whole table, mapped
	hot        backend.Buffer     // hotRows x cols
	slot       backend.Buffer     // int32 per node: hot row or -1 (nil when nothing is hot)
	hotRows    int
	vbytes     int64 // bytes a value: 4, or 2 for bfloat16
	gather     backend.Kernel
	gather4    backend.Kernel
}

// device is what a Store needs of its back end: kernels compiled at run
// time, a queue to launch them on and mapped pinned memory for the table.
type device interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
}

// HotByInDegree orders nodes by decreasing in-degree (row length of the
// in-adjacency in), ties by node id.
func HotByInDegree(in *graph.CSR) []graph.NodeID {
	n := int(in.NumRows)
	order := make([]graph.NodeID, n)
	for i := range order {
		order[i] = graph.NodeID(i)
	}
	slices.SortStableFunc(order, func(a, b graph.NodeID) int {
		da, db := in.Indptr[a+1]-in.Indptr[a], in.Indptr[b+1]-in.Indptr[b]
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	return order
}

// New copies the rows x cols table feats (row-major) into mapped pinned
// host memory and the hottest rows, within opt.BudgetBytes, into device
// memory. dev must compile and launch kernels and map pinned memory
// (backend.Kernels, Enqueuer and PinnedMemory: the CUDA back end).
func New(b backend.Backend, feats []float32, rows, cols int, opt Options) (*Store, error) {
	if b == nil {
		return nil, fmt.Errorf("feature: nil device")
	}
	dev, ok := b.(device)
	if !ok {
		return nil, fmt.Errorf("feature: %s cannot gather on the device: it lacks run-time kernels, a queue or mapped pinned memory (backend.Kernels, Enqueuer, PinnedMemory)", b.Name())
	}
	if rows < 0 || cols <= 0 || rows >= 1<<31 || len(feats) != rows*cols {
		return nil, fmt.Errorf("feature: table of %d values is not %d rows x %d cols (rows < 2^31, cols > 0)", len(feats), rows, cols)
	}
	if opt.BudgetBytes < 0 {
		return nil, fmt.Errorf("feature: negative budget %d", opt.BudgetBytes)
	}
	s := &Store{dev: dev, queue: dev, rows: rows, cols: cols, vbytes: 4}
	gather, gather4 := "feat_gather", "feat_gather4"
	if opt.BFloat16 {
		s.vbytes, gather, gather4 = 2, "feat_gather_bf16", "feat_gather_bf16x4"
	}
	mod, err := dev.LoadKernels("feature", kernelSrc)
	if err != nil {
		return nil, err
	}
	if s.gather, err = mod.Kernel(gather); err != nil {
		return nil, err
	}
	if s.gather4, err = mod.Kernel(gather4); err != nil {
		return nil, err
	}
	if rows == 0 {
		return s, nil
	}
	if s.host, err = dev.AllocPinned(uint64(len(feats))*uint64(s.vbytes), true); err != nil {
		return nil, fmt.Errorf("feature: pinning the %d x %d table: %w", rows, cols, err)
	}
	if opt.BFloat16 {
		backend.ToBF16(bf16s(s.host), feats)
	} else {
		copy(s.host.Float32s(), feats)
	}
	// Hot rows: what the budget allows after the slot table.
	rowBytes := int64(cols) * s.vbytes
	if avail := opt.BudgetBytes - 4*int64(rows); avail >= rowBytes {
		order := opt.Hot
		if order == nil {
			order = make([]graph.NodeID, rows)
			for i := range order {
				order[i] = graph.NodeID(i)
			}
		}
		s.hotRows = int(min(avail/rowBytes, int64(len(order))))
		slot := make([]int32, rows)
		for i := range slot {
			slot[i] = -1
		}
		hot := make([]float32, 0, s.hotRows*cols)
		for i, v := range order[:s.hotRows] {
			if v < 0 || int(v) >= rows {
				s.Close()
				return nil, &backend.IndexError{Op: "feature.New", Name: "Hot", Pos: i, Value: int64(v), Limit: rows}
			}
			if slot[v] >= 0 {
				s.Close()
				return nil, fmt.Errorf("feature: Hot[%d] = %d repeats an earlier node", i, v)
			}
			slot[v] = int32(i)
			hot = append(hot, feats[int(v)*cols:(int(v)+1)*cols]...)
		}
		if err := s.upload(&s.slot, backend.Int32, slot); err != nil {
			s.Close()
			return nil, err
		}
		var data any = hot
		dt := backend.Float32
		if opt.BFloat16 {
			enc := make([]uint16, len(hot))
			backend.ToBF16(enc, hot)
			data, dt = enc, backend.BFloat16
		}
		if err := s.upload(&s.hot, dt, data); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) upload(dst *backend.Buffer, dt backend.DType, data any) error {
	n := 0
	switch v := data.(type) {
	case []int32:
		n = len(v)
	case []float32:
		n = len(v)
	case []uint16:
		n = len(v)
	}
	b, err := s.dev.Alloc(dt, n)
	if err != nil {
		return fmt.Errorf("feature: device cache: %w", err)
	}
	*dst = b
	return s.dev.Upload(b, data)
}

// Rows and Cols give the table's shape.
func (s *Store) Rows() int { return s.rows }

// Cols is the feature width.
func (s *Store) Cols() int { return s.cols }

// HotRows is the number of rows cached in device memory.
func (s *Store) HotRows() int { return s.hotRows }

// DeviceBytes is the device memory the store holds.
func (s *Store) DeviceBytes() int64 {
	if s.slot == nil {
		return 0
	}
	return 4*int64(s.rows) + s.vbytes*int64(s.hotRows)*int64(s.cols)
}

// BFloat16 reports whether the table is kept as bfloat16 (Options).
func (s *Store) BFloat16() bool { return s.vbytes == 2 }

// bf16s is h's memory as bfloat16 encodings.
func bf16s(h backend.HostBuffer) []uint16 {
	b := h.Bytes()
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// Gather writes the rows of nodes (an int32 device buffer, each in
// [0, Rows())) into dst (len(nodes) x Cols() float32 device buffer), both
// buffers of the store's device. Bad node ids zero their row and are
// reported by the device's next Synchronize as a *backend.IndexError.
func (s *Store) Gather(dst, nodes backend.Buffer) error {
	const op = "feature.Gather"
	if nodes == nil || nodes.DType() != backend.Int32 {
		return &backend.ShapeError{Op: op, Msg: "nodes must be an int32 buffer on the store's device"}
	}
	n := nodes.Len()
	if err := backend.CheckLen(op, "dst", dst, backend.Float32, n*s.cols); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return s.queue.Enqueue(func(q backend.Queue) error {
		// The queue refuses buffers of another device (ShapeError).
		slot, err := q.IndexSlot(op, "nodes", nodes, s.rows)
		if err != nil {
			return err
		}
		var cold backend.DevPtr
		if s.host != nil {
			cold = s.host.DeviceAddr()
		}
		// Vector loads of four values: 16 bytes (float32) or 8
		// (bfloat16); the table's and the hot rows' starts are
		// allocation starts, so row alignment follows from cols % 4.
		if s.cols%4 == 0 && q.Aligned(dst, 16) {
			return q.Launch(s.gather4, int64(n)*int64(s.cols/4), backend.Buf(dst), backend.Buf(nodes), backend.I64(int64(n)),
				backend.Buf(s.slot), backend.Buf(s.hot), backend.Addr(cold), backend.I64(int64(s.rows)), backend.I64(int64(s.cols/4)), backend.U64(slot))
		}
		return q.Launch(s.gather, int64(n)*int64(s.cols), backend.Buf(dst), backend.Buf(nodes), backend.I64(int64(n)),
			backend.Buf(s.slot), backend.Buf(s.hot), backend.Addr(cold), backend.I64(int64(s.rows)), backend.I64(int64(s.cols)), backend.U64(slot))
	})
}

// Close releases device and pinned memory.
func (s *Store) Close() error {
	if s == nil {
		return nil
	}
	s.dev.Free(s.hot)
	s.dev.Free(s.slot)
	s.hot, s.slot = nil, nil
	if s.host != nil {
		err := s.host.Free()
		s.host = nil
		return err
	}
	return nil
}
