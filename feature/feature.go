package feature

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/graph"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
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
}

// Store gathers feature rows on one GPU. It is safe for concurrent use.
type Store struct {
	dev        *cuda.Device
	rows, cols int
	host       *cuda.HostBuffer // whole table, mapped
	hot        *cuda.Buffer     // hotRows x cols
	slot       *cuda.Buffer     // int32 per node: hot row or -1 (nil when nothing is hot)
	hotRows    int
	gather     cu.Function
	gather4    cu.Function
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
// memory.
func New(dev *cuda.Device, feats []float32, rows, cols int, opt Options) (*Store, error) {
	if dev == nil {
		return nil, fmt.Errorf("feature: nil device")
	}
	if rows < 0 || cols <= 0 || rows >= 1<<31 || len(feats) != rows*cols {
		return nil, fmt.Errorf("feature: table of %d values is not %d rows x %d cols (rows < 2^31, cols > 0)", len(feats), rows, cols)
	}
	if opt.BudgetBytes < 0 {
		return nil, fmt.Errorf("feature: negative budget %d", opt.BudgetBytes)
	}
	s := &Store{dev: dev, rows: rows, cols: cols}
	mod, err := dev.LoadModule("feature", cuda.CommonSource()+kernelSrc)
	if err != nil {
		return nil, err
	}
	if s.gather, err = mod.Func("feat_gather"); err != nil {
		return nil, err
	}
	if s.gather4, err = mod.Func("feat_gather4"); err != nil {
		return nil, err
	}
	if rows == 0 {
		return s, nil
	}
	if s.host, err = dev.AllocHost(uint64(len(feats))*4, true); err != nil {
		return nil, fmt.Errorf("feature: pinning the %d x %d table: %w", rows, cols, err)
	}
	copy(s.host.Float32s(), feats)
	// Hot rows: what the budget allows after the slot table.
	rowBytes := int64(cols) * 4
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
		if err := s.upload(&s.hot, backend.Float32, hot); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) upload(dst **cuda.Buffer, dt backend.DType, data any) error {
	n := 0
	switch v := data.(type) {
	case []int32:
		n = len(v)
	case []float32:
		n = len(v)
	}
	b, err := s.dev.Alloc(dt, n)
	if err != nil {
		return fmt.Errorf("feature: device cache: %w", err)
	}
	*dst = b.(*cuda.Buffer)
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
	return 4*int64(s.rows) + 4*int64(s.hotRows)*int64(s.cols)
}

// Gather writes the rows of nodes (an int32 device buffer, each in
// [0, Rows())) into dst (len(nodes) x Cols() float32 device buffer).
// Bad node ids zero their row and are reported by the device's next
// Synchronize as a *backend.IndexError.
func (s *Store) Gather(dst, nodes *cuda.Buffer) error {
	const op = "feature.Gather"
	if nodes == nil || nodes.DType() != backend.Int32 || nodes.Device() != s.dev {
		return &backend.ShapeError{Op: op, Msg: "nodes must be an int32 buffer on the store's device"}
	}
	n := nodes.Len()
	if err := backend.CheckLen(op, "dst", dst, backend.Float32, n*s.cols); err != nil {
		return err
	}
	if dst.Device() != s.dev {
		return &backend.ShapeError{Op: op, Msg: "dst lives on another device"}
	}
	if n == 0 {
		return nil
	}
	return s.dev.Do(func(l *cuda.Locked) error {
		slot, err := l.IndexSlot(op, "nodes", nodes, s.rows)
		if err != nil {
			return err
		}
		var cold cu.DevPtr
		if s.host != nil {
			cold = s.host.DevPtr()
		}
		hot, sl := s.hot.Ptr(), s.slot.Ptr()
		if s.cols%4 == 0 && dst.Ptr()%16 == 0 {
			return l.Launch1D(s.gather4, int64(n)*int64(s.cols/4), uint64(dst.Ptr()), uint64(nodes.Ptr()), cu.I64(int64(n)),
				uint64(sl), uint64(hot), uint64(cold), cu.I64(int64(s.rows)), cu.I64(int64(s.cols/4)), slot)
		}
		return l.Launch1D(s.gather, int64(n)*int64(s.cols), uint64(dst.Ptr()), uint64(nodes.Ptr()), cu.I64(int64(n)),
			uint64(sl), uint64(hot), uint64(cold), cu.I64(int64(s.rows)), cu.I64(int64(s.cols)), slot)
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
