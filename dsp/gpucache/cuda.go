package gpucache

import (
	"fmt"

	"github.com/strata-gnn/strata/dsp/internal/devbuf"
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

// CUDAFetch copies a device buffer of IDs to pinned host memory behind
// the device's queued work and waits with a Fence (without the device
// lock). Its pinned buffer is allocated once, for maxIDs IDs: freeing
// pinned memory while collectives run on other devices of the process can
// stall them (cuMemFreeHost synchronizes), so it never grows.
type CUDAFetch struct {
	dev   *cuda.Device
	fence *devbuf.Fence
	host  *cuda.HostBuffer
	max   int
	out   bool
}

// NewCUDAFetch returns a fetcher for up to maxIDs IDs on dev.
func NewCUDAFetch(dev *cuda.Device, maxIDs int) (*CUDAFetch, error) {
	if maxIDs < 1 || maxIDs > 1<<31 {
		return nil, fmt.Errorf("%w: fetch capacity %d", ErrInput, maxIDs)
	}
	f, err := devbuf.NewFence(dev)
	if err != nil {
		return nil, err
	}
	h, err := dev.AllocHost(uint64(4*maxIDs), false)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &CUDAFetch{dev: dev, fence: f, host: h, max: maxIDs}, nil
}

// Fetch queues the copy of src's first n IDs (after the work already
// queued on the device) and returns the function that waits for it and
// returns them. One copy at a time.
func (f *CUDAFetch) Fetch(src backend.Buffer, n int) (func() ([]int32, error), error) {
	if f.out {
		return nil, fmt.Errorf("gpucache: fetch while another is outstanding")
	}
	cb, ok := src.(*cuda.Buffer)
	if !ok || cb.Device() != f.dev || cb.DType() != backend.Int32 || n < 0 || n > cb.Len() {
		return nil, fmt.Errorf("%w: fetch of %d IDs from a %T", ErrInput, n, src)
	}
	if n > f.max {
		return nil, fmt.Errorf("%w: %d IDs, more than the %d the fetcher holds", ErrInput, n, f.max)
	}
	if err := f.dev.Do(func(l *cuda.Locked) error {
		if n > 0 {
			if err := l.CopyToHost(f.host, 0, cb, uint64(4*n)); err != nil {
				return err
			}
		}
		return f.fence.Mark(l)
	}); err != nil {
		return nil, err
	}
	f.out = true
	return func() ([]int32, error) {
		f.out = false
		if err := f.fence.Wait(); err != nil {
			return nil, err
		}
		out := make([]int32, n)
		copy(out, f.host.Int32s()[:n])
		return out, nil
	}, nil
}

// Close frees the pinned buffer and the fence.
func (f *CUDAFetch) Close() error {
	var err error
	if f.host != nil {
		err = f.host.Free()
		f.host = nil
	}
	if e := f.fence.Close(); err == nil {
		err = e
	}
	return err
}
