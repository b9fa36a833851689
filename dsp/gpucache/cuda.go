package gpucache

import (
	"fmt"

	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// CUDAStore is a Store on a GPU (package feature): hot rows in device
// memory, the whole table in mapped pinned host memory for the rest
// (read through UVA).
type CUDAStore struct {
	s *feature.Store
}

// NewCUDAStore copies the rows x cols table x into pinned host memory and
// the rows of hot (in order: hot[i] is cache row i) into dev's memory.
func NewCUDAStore(dev *cuda.Device, x []float32, rows, cols int, hot []graph.NodeID) (*CUDAStore, error) {
	var budget int64
	if len(hot) > 0 {
		// The slot table (4 bytes a node) plus exactly the hot rows.
		budget = 4*int64(rows) + 4*int64(len(hot))*int64(cols)
	}
	s, err := feature.New(dev, x, rows, cols, feature.Options{BudgetBytes: budget, Hot: hot})
	if err != nil {
		return nil, err
	}
	if s.HotRows() != len(hot) {
		s.Close()
		return nil, fmt.Errorf("gpucache: feature store holds %d hot rows, want %d", s.HotRows(), len(hot))
	}
	return &CUDAStore{s: s}, nil
}

// Gather queues the gather of nodes' rows into dst (both on the store's
// device).
func (c *CUDAStore) Gather(dst, nodes backend.Buffer) error {
	d, ok := dst.(*cuda.Buffer)
	n, ok2 := nodes.(*cuda.Buffer)
	if !ok || !ok2 {
		return fmt.Errorf("%w: gather needs CUDA buffers, got %T and %T", ErrInput, dst, nodes)
	}
	return c.s.Gather(d, n)
}

func (c *CUDAStore) HotRows() int       { return c.s.HotRows() }
func (c *CUDAStore) DeviceBytes() int64 { return c.s.DeviceBytes() }
func (c *CUDAStore) Close() error       { return c.s.Close() }
