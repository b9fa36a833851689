package fullgraph

import (
	"sync"

	"github.com/strata-gnn/strata/tensor/backend"
)

// meter wraps a back end and counts the bytes of its live buffers and
// sparse matrices: what the memory report measures. Buffers are the
// wrapped back end's own, so they pass to it unchanged.
type meter struct {
	backend.Backend
	mu                 sync.Mutex
	live, peak         int64 // dense buffers
	sparse, sparsePeak int64 // CSR structures (indptr + indices)
	livePlusSparsePeak int64
}

func newMeter(b backend.Backend) *meter {
	if m, ok := b.(*meter); ok {
		return &meter{Backend: m.Backend}
	}
	return &meter{Backend: b}
}

func (m *meter) add(dense, sparse int64) {
	m.mu.Lock()
	m.live += dense
	m.sparse += sparse
	m.peak = max(m.peak, m.live)
	m.sparsePeak = max(m.sparsePeak, m.sparse)
	m.livePlusSparsePeak = max(m.livePlusSparsePeak, m.live+m.sparse)
	m.mu.Unlock()
}

// Live returns the bytes of live dense buffers.
func (m *meter) Live() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Peak returns the largest number of bytes live at once, dense buffers
// and sparse structures together.
func (m *meter) Peak() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.livePlusSparsePeak
}

// SparseBytes returns the bytes of live sparse structures.
func (m *meter) SparseBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sparse
}

func (m *meter) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	buf, err := m.Backend.Alloc(dt, n)
	if err == nil {
		m.add(int64(n)*int64(dt.Size()), 0)
	}
	return buf, err
}

// rawAllocator is the optional back-end method for buffers whose
// contents start undefined (see autograd).
type rawAllocator interface {
	AllocRaw(dt backend.DType, n int) (backend.Buffer, error)
}

// AllocRaw is Alloc without the zero fill when the back end offers it:
// for outputs that are written before they are read.
func (m *meter) AllocRaw(dt backend.DType, n int) (backend.Buffer, error) {
	ra, ok := m.Backend.(rawAllocator)
	if !ok {
		return m.Alloc(dt, n)
	}
	buf, err := ra.AllocRaw(dt, n)
	if err == nil {
		m.add(int64(n)*int64(dt.Size()), 0)
	}
	return buf, err
}

func (m *meter) Free(b backend.Buffer) {
	if b == nil {
		return
	}
	size := int64(b.Len()) * int64(b.DType().Size())
	m.Backend.Free(b)
	m.add(-size, 0)
}

// sparseBytes estimates a CSR's footprint: int64 indptr, int32 indices.
func sparseBytes(rows, nnz int) int64 { return 8*int64(rows+1) + 4*int64(nnz) }

func (m *meter) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	s, err := m.Backend.NewSparse(rows, cols, indptr, indices)
	if err == nil {
		m.add(0, sparseBytes(rows, len(indices)))
	}
	return s, err
}

func (m *meter) FreeSparse(s backend.Sparse) {
	if s == nil {
		return
	}
	size := sparseBytes(s.NumRows(), s.NNZ())
	m.Backend.FreeSparse(s)
	m.add(0, -size)
}

// step owns the buffers of one training or evaluation step (freed by
// release) and keeps the first error, so a sequence of back-end calls can
// be written without a check after each: once err is set, later calls are
// skipped.
type step struct {
	b     *meter
	bufs  []backend.Buffer
	bytes int64
	err   error
}

func newStep(b *meter) *step { return &step{b: b} }

// f32 returns a float32 buffer of n elements owned by the step, or nil
// once an error has occurred. Its contents are undefined (zero on back
// ends without AllocRaw): every step buffer is written before it is read.
func (s *step) f32(n int) backend.Buffer {
	if s.err != nil {
		return nil
	}
	buf, err := s.b.AllocRaw(backend.Float32, n)
	if err != nil {
		s.err = err
		return nil
	}
	s.bufs = append(s.bufs, buf)
	s.bytes += 4 * int64(n)
	return buf
}

// do records err if it is the first.
func (s *step) do(err error) {
	if s.err == nil && err != nil {
		s.err = err
	}
}

// ok reports whether no error has occurred.
func (s *step) ok() bool { return s.err == nil }

// drop frees buffers of the step that are no longer needed (nil entries
// are ignored), so the memory they held is not kept until release.
func (s *step) drop(bufs ...backend.Buffer) {
	for _, b := range bufs {
		if b == nil {
			continue
		}
		for i := len(s.bufs) - 1; i >= 0; i-- {
			if s.bufs[i] == b {
				s.bytes -= 4 * int64(b.Len())
				s.b.Free(b)
				s.bufs = append(s.bufs[:i], s.bufs[i+1:]...)
				break
			}
		}
	}
}

// keep removes b from the step without freeing it: the caller owns it.
func (s *step) keep(b backend.Buffer) {
	for i := len(s.bufs) - 1; i >= 0; i-- {
		if s.bufs[i] == b {
			s.bufs = append(s.bufs[:i], s.bufs[i+1:]...)
			s.bytes -= 4 * int64(b.Len())
			return
		}
	}
}

// release frees the step's buffers, newest first.
func (s *step) release() {
	for i := len(s.bufs) - 1; i >= 0; i-- {
		s.b.Free(s.bufs[i])
	}
	s.bufs = nil
}
