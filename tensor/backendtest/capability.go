package backendtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Capabilities checks each optional capability of package backend that b
// (or its buffers) implements, through the interfaces alone, and logs
// which ones it has. want lists capabilities b must have (by the names
// CapabilityNames returns), so that a back end cannot lose one silently.
// Kernels are not exercised here (their source is back-end specific);
// the queue around them (Enqueuer) is.
func Capabilities(t *testing.T, b backend.Backend, want ...string) {
	have := CapabilityNames(b)
	t.Logf("%s has %v", b.Name(), have)
	for _, w := range want {
		if !slices.Contains(have, w) {
			t.Errorf("%s lacks capability %s", b.Name(), w)
		}
	}
	tests := []struct {
		name string
		fn   func(*testing.T, backend.Backend)
	}{
		{"Slicer", capSlicer},
		{"Siblings", capSiblings},
		{"Fences", capFences},
		{"PinnedMemory", capPinned},
		{"SparseBuilder", capSparse},
		{"SparseAdopter", capAdopt},
		{"Memory", capMemory},
		{"Enqueuer", capQueue},
	}
	for _, tc := range tests {
		if !slices.Contains(have, tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, b)
			if err := b.Synchronize(); err != nil {
				t.Fatalf("Synchronize after %s: %v", tc.name, err)
			}
		})
	}
}

// CapabilityNames lists the capabilities b implements (Slicer for its
// float32 buffers).
func CapabilityNames(b backend.Backend) []string {
	var have []string
	if buf, err := b.Alloc(backend.Float32, 1); err == nil {
		if _, ok := buf.(backend.Slicer); ok {
			have = append(have, "Slicer")
		}
		b.Free(buf)
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"Siblings", is[backend.Siblings](b)},
		{"Fences", is[backend.Fences](b)},
		{"PinnedMemory", is[backend.PinnedMemory](b)},
		{"SparseBuilder", is[backend.SparseBuilder](b)},
		{"SparseAdopter", is[backend.SparseAdopter](b)},
		{"Memory", is[backend.Memory](b)},
		{"Kernels", is[backend.Kernels](b)},
		{"Enqueuer", is[backend.Enqueuer](b)},
		{"Fused", is[backend.Fused](b)},
	} {
		if c.ok {
			have = append(have, c.name)
		}
	}
	return have
}

func is[T any](b backend.Backend) bool {
	_, ok := b.(T)
	return ok
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func upF32(t *testing.T, b backend.Backend, v []float32) backend.Buffer {
	t.Helper()
	buf, err := b.Alloc(backend.Float32, len(v))
	must(t, "Alloc", err)
	must(t, "Upload", b.Upload(buf, v))
	return buf
}

func upI64(t *testing.T, b backend.Backend, v []int64) backend.Buffer {
	t.Helper()
	buf, err := b.Alloc(backend.Int64, len(v))
	must(t, "Alloc", err)
	must(t, "Upload", b.Upload(buf, v))
	return buf
}

func upI32(t *testing.T, b backend.Backend, v []int32) backend.Buffer {
	t.Helper()
	buf, err := b.Alloc(backend.Int32, len(v))
	must(t, "Alloc", err)
	must(t, "Upload", b.Upload(buf, v))
	return buf
}

func downF32(t *testing.T, b backend.Backend, buf backend.Buffer) []float32 {
	t.Helper()
	v := make([]float32, buf.Len())
	must(t, "Download", b.Download(v, buf))
	return v
}

func downI64(t *testing.T, b backend.Backend, buf backend.Buffer) []int64 {
	t.Helper()
	v := make([]int64, buf.Len())
	must(t, "Download", b.Download(v, buf))
	return v
}

// capSlicer: a view shares memory with its buffer, at an offset, for
// every dtype; windows outside the buffer are refused; freeing a view
// leaves the buffer alone; Truncate shortens in place.
func capSlicer(t *testing.T, b backend.Backend) {
	x := upF32(t, b, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	defer b.Free(x)
	v, err := backend.View(x, 2, 3)
	must(t, "View", err)
	if v.Len() != 3 || v.DType() != backend.Float32 {
		t.Fatalf("view of 3 float32: %d %v", v.Len(), v.DType())
	}
	must(t, "Fill", b.Fill(v, 9))
	b.Free(v)
	if got, want := downF32(t, b, x), []float32{1, 2, 9, 9, 9, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("after filling view [2, 5) and freeing it: %v, want %v", got, want)
	}
	if e, err := backend.View(x, 8, 0); err != nil || e.Len() != 0 {
		t.Fatalf("empty view at the end: %v, %v", e, err)
	}
	for _, c := range [][2]int{{-1, 1}, {0, 9}, {9, 0}, {1, -1}, {7, 2}} {
		if _, err := backend.View(x, c[0], c[1]); err == nil {
			t.Errorf("View(%d, %d) of 8 elements: no error", c[0], c[1])
		}
	}
	if _, err := backend.View(nil, 0, 0); err == nil {
		t.Error("View of nil: no error")
	}
	// Overlap: views of one buffer overlap where their windows do.
	v1, err := backend.View(x, 0, 4)
	must(t, "View", err)
	v2, err := backend.View(x, 3, 5)
	must(t, "View", err)
	v3, err := backend.View(x, 4, 4)
	must(t, "View", err)
	other := upF32(t, b, make([]float32, 8))
	defer b.Free(other)
	for _, c := range []struct {
		name string
		a, b backend.Buffer
		want bool
	}{
		{"buffer and itself", x, x, true}, {"buffer and a view", x, v2, true}, {"view and buffer", v3, x, true},
		{"[0,4) and [3,8)", v1, v2, true}, {"[0,4) and [4,8)", v1, v3, false}, {"two buffers", x, other, false},
		{"buffer and nil", x, nil, false},
	} {
		if got := backend.Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap of %s = %v, want %v", c.name, got, c.want)
		}
	}
	// int32 and int64 views: copy into the middle.
	for _, dt := range []backend.DType{backend.Int32, backend.Int64} {
		buf, err := b.Alloc(dt, 6)
		must(t, "Alloc", err)
		src, err := b.Alloc(dt, 2)
		must(t, "Alloc", err)
		if dt == backend.Int32 {
			must(t, "Upload", b.Upload(src, []int32{7, -7}))
		} else {
			must(t, "Upload", b.Upload(src, []int64{7, -7}))
		}
		w, err := backend.View(buf, 3, 2)
		must(t, "View", err)
		must(t, "Copy", b.Copy(w, src))
		got := make([]int64, 6)
		if dt == backend.Int32 {
			g := make([]int32, 6)
			must(t, "Download", b.Download(g, buf))
			for i := range g {
				got[i] = int64(g[i])
			}
		} else {
			must(t, "Download", b.Download(got, buf))
		}
		if want := []int64{0, 0, 0, 7, -7, 0}; !slices.Equal(got, want) {
			t.Errorf("%v: copy into view [3, 5): %v, want %v", dt, got, want)
		}
		b.Free(buf)
		b.Free(src)
	}
	// Truncate.
	y := upF32(t, b, []float32{1, 2, 3, 4, 5})
	defer b.Free(y)
	must(t, "Truncate", backend.Truncate(y, 3))
	if y.Len() != 3 {
		t.Fatalf("Len after Truncate(3) = %d", y.Len())
	}
	if got := downF32(t, b, y); !slices.Equal(got, []float32{1, 2, 3}) {
		t.Fatalf("truncated buffer holds %v", got)
	}
	if err := backend.Truncate(y, 4); err == nil {
		t.Error("Truncate past the length: no error")
	}
	if err := backend.Truncate(nil, 0); err == nil {
		t.Error("Truncate of nil: no error")
	}
}

// capSiblings: a sibling is the same device, has its own queue, reads
// and writes this handle's buffers through aliases, and closes without
// disturbing this handle.
func capSiblings(t *testing.T, b backend.Backend) {
	sb := b.(backend.Siblings)
	if !sb.SameDevice(b) {
		t.Error("SameDevice(itself) is false")
	}
	if sb.SameDevice(nil) {
		t.Error("SameDevice(nil) is true")
	}
	for _, hp := range []bool{false, true} {
		s, err := sb.Sibling(backend.SiblingOptions{HighPriority: hp})
		must(t, "Sibling", err)
		if !sb.SameDevice(s) || !s.(backend.Siblings).SameDevice(b) {
			t.Errorf("HighPriority=%v: sibling is not the same device", hp)
		}
		x := upF32(t, b, []float32{1, 2, 3})
		must(t, "Synchronize", b.Synchronize()) // x is written before the sibling reads it
		if !sb.Owns(x) {
			t.Error("a handle does not own its own buffer")
		}
		if hp && s.(backend.Siblings).QueuePriority() > sb.QueuePriority() {
			t.Errorf("a high-priority sibling has queue priority %d, this handle %d", s.(backend.Siblings).QueuePriority(), sb.QueuePriority())
		}
		a, err := s.(backend.Siblings).Alias(x)
		must(t, "Alias", err)
		if !s.(backend.Siblings).Owns(a) {
			t.Error("a sibling does not own its alias")
		}
		if got := downF32(t, s, a); !slices.Equal(got, []float32{1, 2, 3}) {
			t.Errorf("sibling reads %v through the alias", got)
		}
		must(t, "Fill", s.Fill(a, 4))
		must(t, "sibling Synchronize", s.Synchronize())
		s.Free(a) // owns nothing
		if got := downF32(t, b, x); !slices.Equal(got, []float32{4, 4, 4}) {
			t.Errorf("after the sibling filled the alias: %v", got)
		}
		if _, err := s.(backend.Siblings).Alias(nil); err == nil {
			t.Error("Alias of nil: no error")
		}
		// Each handle allocates and computes on its own.
		y := upF32(t, s, []float32{1, 1})
		must(t, "Axpby", s.Axpby(y, 2, y, 1, y))
		if got := downF32(t, s, y); !slices.Equal(got, []float32{3, 3}) {
			t.Errorf("sibling's own work: %v", got)
		}
		s.Free(y)
		must(t, "Close", s.Close())
		if got := downF32(t, b, x); !slices.Equal(got, []float32{4, 4, 4}) {
			t.Errorf("after closing the sibling: %v", got)
		}
		b.Free(x)
	}
}

// capFences: a fence recorded after queued work is reached once that
// work has run; it can be recorded again after each wait.
func capFences(t *testing.T, b backend.Backend) {
	f, err := b.(backend.Fences).NewFence()
	must(t, "NewFence", err)
	x := upF32(t, b, make([]float32, 1<<16))
	defer b.Free(x)
	for i := range 3 {
		must(t, "Fill", b.Fill(x, float32(i)))
		must(t, "Record", f.Record())
		must(t, "Wait", f.Wait())
		if got := downF32(t, b, x); got[len(got)-1] != float32(i) {
			t.Fatalf("round %d: %v after the fence", i, got[len(got)-1])
		}
	}
	must(t, "Close", f.Close())
}

// capPinned: pinned memory has the size asked for in every typed view,
// keeps what is written, has a device address exactly when mapped, and
// zero bytes are refused.
func capPinned(t *testing.T, b backend.Backend) {
	pm := b.(backend.PinnedMemory)
	for _, mapped := range []bool{false, true} {
		h, err := pm.AllocPinned(64, mapped)
		must(t, "AllocPinned", err)
		if len(h.Bytes()) != 64 || len(h.Float32s()) != 16 || len(h.Int32s()) != 16 || len(h.Int64s()) != 8 {
			t.Fatalf("64 bytes: %d bytes, %d float32, %d int32, %d int64", len(h.Bytes()), len(h.Float32s()), len(h.Int32s()), len(h.Int64s()))
		}
		h.Int64s()[7] = -3
		if h.Int32s()[14] != -3 || h.Bytes()[63] != 0xff {
			t.Errorf("the typed views do not share memory")
		}
		if (h.DeviceAddr() != 0) != mapped {
			t.Errorf("mapped=%v: device address %#x", mapped, h.DeviceAddr())
		}
		must(t, "Free", h.Free())
	}
	if _, err := pm.AllocPinned(0, false); err == nil {
		t.Error("AllocPinned(0): no error")
	}
}

// capAdopt: a Sparse that adopted host arrays multiplies like the same
// matrix from NewSparse, forward and transposed; the arrays NewSparse
// rejects, AdoptSparse rejects with the same kind of error.
func capAdopt(t *testing.T, b backend.Backend) {
	ad := b.(backend.SparseAdopter)
	indptr, indices := []int64{0, 2, 2, 3}, []int32{1, 0, 2}
	ref, err := b.NewSparse(3, 3, indptr, indices)
	must(t, "NewSparse", err)
	defer b.FreeSparse(ref)
	a, err := ad.AdoptSparse(3, 3, slices.Clone(indptr), slices.Clone(indices))
	must(t, "AdoptSparse", err)
	defer b.FreeSparse(a)
	if a.NumRows() != 3 || a.NumCols() != 3 || a.NNZ() != 3 {
		t.Fatalf("shape %d x %d, %d entries", a.NumRows(), a.NumCols(), a.NNZ())
	}
	x := upF32(t, b, []float32{1, 10, 100, 2, 20, 200})
	defer b.Free(x)
	wants := map[bool][]float32{false: {101, 12, 0, 0, 20, 200}, true: {1, 10, 1, 10, 20, 200}}
	for _, tr := range []bool{false, true} {
		outs := [2][]float32{spmm3x2(t, b, ref, tr, x), spmm3x2(t, b, a, tr, x)}
		if !slices.Equal(outs[0], wants[tr]) || !slices.Equal(outs[1], wants[tr]) {
			t.Errorf("transpose %v: SpMM over the adopted arrays %v, over NewSparse %v, want %v", tr, outs[1], outs[0], wants[tr])
		}
	}
	for _, bad := range []struct {
		name    string
		rows    int
		indptr  []int64
		indices []int32
		index   bool // an IndexError, else a ShapeError
	}{
		{"indptr length", 2, []int64{0, 1}, []int32{0}, false},
		{"indptr decreases", 2, []int64{0, 2, 1}, []int32{0}, false},
		{"entry count", 2, []int64{0, 1, 2}, []int32{0}, false},
		{"column out of range", 2, []int64{0, 1, 2}, []int32{0, 2}, true},
		{"negative column", 2, []int64{0, 1, 2}, []int32{-1, 0}, true},
	} {
		s, err := ad.AdoptSparse(bad.rows, 2, bad.indptr, bad.indices)
		var se *backend.ShapeError
		var ie *backend.IndexError
		if s != nil || (bad.index && !errors.As(err, &ie)) || (!bad.index && !errors.As(err, &se)) {
			t.Errorf("AdoptSparse, %s: %v, %v", bad.name, s, err)
		}
	}
}

// spmm3x2 is m (3 x 3), or its transpose, times x (3 x 2), downloaded.
func spmm3x2(t *testing.T, b backend.Backend, m backend.Sparse, transpose bool, x backend.Buffer) []float32 {
	out, err := b.Alloc(backend.Float32, 6)
	must(t, "Alloc", err)
	defer b.Free(out)
	must(t, "SpMM", b.SpMM(out, m, transpose, x, nil, 1, 2))
	return downF32(t, b, out)
}

// capSparse: a Sparse over CSR buffers multiplies like the same matrix
// from NewSparse; wrong dtypes and lengths are shape errors.
func capSparse(t *testing.T, b backend.Backend) {
	sbl := b.(backend.SparseBuilder)
	indptr, indices := []int64{0, 2, 2, 3}, []int32{1, 0, 2}
	ref, err := b.NewSparse(3, 3, indptr, indices)
	must(t, "NewSparse", err)
	defer b.FreeSparse(ref)
	p, c := upI64(t, b, indptr), upI32(t, b, indices)
	a, err := sbl.SparseFromBuffers(3, 3, p, c)
	must(t, "SparseFromBuffers", err)
	defer b.FreeSparse(a)
	if a.NumRows() != 3 || a.NumCols() != 3 || a.NNZ() != 3 {
		t.Fatalf("shape %d x %d, %d entries", a.NumRows(), a.NumCols(), a.NNZ())
	}
	x := upF32(t, b, []float32{1, 10, 100, 2, 20, 200})
	defer b.Free(x)
	outs := [2][]float32{spmm3x2(t, b, ref, false, x), spmm3x2(t, b, a, false, x)}
	if !slices.Equal(outs[0], outs[1]) {
		t.Errorf("SpMM over the buffers %v, over NewSparse %v", outs[1], outs[0])
	}
	for i, m := range []backend.Sparse{ref, a} {
		cb, ok := m.(backend.CSRBuffers)
		if !ok {
			t.Errorf("matrix %d has no CSR buffers (backend.CSRBuffers)", i)
			continue
		}
		ip, ix := cb.CSR()
		if got := downI64(t, b, ip); !slices.Equal(got, indptr) {
			t.Errorf("matrix %d: CSR row pointers %v", i, got)
		}
		got := make([]int32, ix.Len())
		must(t, "Download", b.Download(got, ix))
		if !slices.Equal(got, indices) {
			t.Errorf("matrix %d: CSR indices %v", i, got)
		}
	}
	f := upF32(t, b, []float32{0, 1, 2, 3})
	defer b.Free(f)
	short := upI64(t, b, []int64{0, 1})
	defer b.Free(short)
	for _, c := range []struct {
		name     string
		ptr, idx backend.Buffer
	}{{"float32 indptr", f, c}, {"short indptr", short, c}, {"nil indices", p, nil}, {"float32 indices", p, f}} {
		var se *backend.ShapeError
		if s, err := sbl.SparseFromBuffers(3, 3, c.ptr, c.idx); !errors.As(err, &se) {
			t.Errorf("%s: %v, %v; want a *backend.ShapeError", c.name, s, err)
		}
	}
}

// capMemory: some memory is free, no more than there is; the
// allocator's counters follow an allocation, the peak can be reset and
// the cache released.
func capMemory(t *testing.T, b backend.Backend) {
	m := b.(backend.Memory)
	free, total, err := m.MemInfo()
	must(t, "MemInfo", err)
	if total == 0 || free > total {
		t.Errorf("MemInfo: %d free of %d", free, total)
	}
	must(t, "Synchronize", b.Synchronize())
	must(t, "ReleaseCache", m.ReleaseCache())
	m.ResetPeak()
	before := m.Stats()
	x, err := b.Alloc(backend.Float32, 1<<20)
	must(t, "Alloc", err)
	mid := m.Stats()
	if mid.InUseBytes < before.InUseBytes+4<<20 || mid.PeakBytes < mid.InUseBytes+mid.CachedBytes || mid.Hits+mid.Misses != before.Hits+before.Misses+1 {
		t.Errorf("allocating 4 MiB: stats %+v, before %+v", mid, before)
	}
	b.Free(x)
	if after := m.Stats(); after.InUseBytes != before.InUseBytes || after.CachedBytes < 4<<20 {
		t.Errorf("after freeing 4 MiB: stats %+v, before %+v", after, before)
	}
	must(t, "ReleaseCache", m.ReleaseCache())
	if st := m.Stats(); st.CachedBytes != 0 {
		t.Errorf("after ReleaseCache: %d bytes cached", st.CachedBytes)
	}
}

// capQueue: inside Enqueue, raw allocations, uploads, memsets, scans and
// copies to pinned memory run in queue order; a fence marked in the
// queue is reached; foreign or missing arguments are errors, not
// crashes.
func capQueue(t *testing.T, b backend.Backend) {
	enq := b.(backend.Enqueuer)
	pm, ok := b.(backend.PinnedMemory)
	if !ok {
		t.Fatal("Enqueuer without PinnedMemory: CopyToHost has nowhere to copy")
	}
	h, err := pm.AllocPinned(8*6, false)
	must(t, "AllocPinned", err)
	defer h.Free()
	var f backend.Fence
	if fs, ok := b.(backend.Fences); ok {
		f, err = fs.NewFence()
		must(t, "NewFence", err)
		defer f.Close()
	}
	var kept, kept2 backend.Buffer
	err = enq.Enqueue(func(q backend.Queue) error {
		in, err := q.AllocRaw(backend.Int64, 6)
		if err != nil {
			return err
		}
		defer q.Free(in)
		if err := q.Memset(in, 0); err != nil {
			return err
		}
		if err := q.UploadFrom(in, []int64{3, 1, 4, 1, 5}); err != nil { // a prefix
			return err
		}
		out, err := q.AllocRaw(backend.Int64, 6)
		if err != nil {
			return err
		}
		kept = out
		if err := q.ScanI64(out, in, 6); err != nil {
			return err
		}
		if err := q.CopyToHost(h, 0, out, 8*6); err != nil {
			return err
		}
		cp, err := q.AllocRaw(backend.Int64, 6)
		if err != nil {
			return err
		}
		kept2 = cp
		if err := q.Copy(cp, out); err != nil {
			return err
		}
		if !q.Aligned(out, 8) {
			return errors.New("a fresh buffer is not 8-byte aligned")
		}
		if f != nil {
			return q.Mark(f)
		}
		return nil
	})
	must(t, "Enqueue", err)
	if f != nil {
		must(t, "Wait", f.Wait())
	}
	if got, want := h.Int64s(), []int64{0, 3, 4, 8, 9, 14}; !slices.Equal(got, want) {
		t.Errorf("scan of [3 1 4 1 5 0] copied to host: %v, want %v", got, want)
	}
	if got := downI64(t, b, kept); !slices.Equal(got, []int64{0, 3, 4, 8, 9, 14}) {
		t.Errorf("scan kept on the device: %v", got)
	}
	if got := downI64(t, b, kept2); !slices.Equal(got, []int64{0, 3, 4, 8, 9, 14}) {
		t.Errorf("copy of the scan: %v", got)
	}
	b.Free(kept)
	b.Free(kept2)
	// Errors: bad dtype, too long an upload, nil scan arguments, a host
	// buffer too small; Sync works; the queue stays usable.
	err = enq.Enqueue(func(q backend.Queue) error {
		if _, err := q.AllocRaw(0, 4); err == nil {
			t.Error("AllocRaw of an unknown dtype: no error")
		}
		small, err := q.AllocRaw(backend.Int64, 2)
		if err != nil {
			return err
		}
		defer q.Free(small)
		if err := q.UploadFrom(small, []int64{1, 2, 3}); err == nil {
			t.Error("UploadFrom of 3 elements into 2: no error")
		}
		if err := q.UploadFrom(small, []int32{1}); err == nil {
			t.Error("UploadFrom of int32 into int64: no error")
		}
		if err := q.Copy(small, nil); err == nil {
			t.Error("Copy from nil: no error")
		}
		if err := q.ScanI64(nil, small, 2); err == nil {
			t.Error("ScanI64 into nil: no error")
		}
		if err := q.CopyToHost(h, 40, small, 16); err == nil {
			t.Error("CopyToHost past the host buffer: no error")
		}
		if err := q.Memset(nil, 0); err != nil {
			t.Errorf("Memset of nil: %v", err)
		}
		return q.Sync()
	})
	must(t, "Enqueue", err)
}
