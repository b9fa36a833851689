package commtest

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// host is a typed slice of one dtype with its Buf.
type host struct {
	dt  backend.DType
	f32 []float32
	i32 []int32
	i64 []int64
}

// alloc makes a host slice with cm.Alloc (when cm is not nil) and
// records how to free it.
type allocator struct {
	cm    comm.Comm
	bufs  []comm.Buf
	fails int
}

func (a *allocator) host(dt backend.DType, n int) host {
	if a == nil || a.cm == nil {
		return newHost(dt, n)
	}
	b, err := a.cm.Alloc(dt, n)
	if err != nil {
		a.fails++
		return newHost(dt, n)
	}
	a.bufs = append(a.bufs, b)
	return host{dt: dt, f32: b.Float32s(), i32: b.Int32s(), i64: b.Int64s()}
}

func (a *allocator) free() error {
	if a == nil || a.cm == nil {
		return nil
	}
	var err error
	for _, b := range a.bufs {
		if e := a.cm.Free(b); e != nil && err == nil {
			err = e
		}
	}
	a.bufs = nil
	return err
}

func newHost(dt backend.DType, n int) host {
	h := host{dt: dt}
	switch dt {
	case backend.Float32:
		h.f32 = make([]float32, n)
	case backend.Int32:
		h.i32 = make([]int32, n)
	case backend.Int64:
		h.i64 = make([]int64, n)
	}
	return h
}

func (h host) buf() comm.Buf {
	switch h.dt {
	case backend.Float32:
		return comm.F32(h.f32)
	case backend.Int32:
		return comm.I32(h.i32)
	}
	return comm.I64(h.i64)
}

func (h host) len() int { return len(h.f32) + len(h.i32) + len(h.i64) }

func (h host) slice(lo, hi int) host {
	s := host{dt: h.dt}
	switch h.dt {
	case backend.Float32:
		s.f32 = h.f32[lo:hi]
	case backend.Int32:
		s.i32 = h.i32[lo:hi]
	case backend.Int64:
		s.i64 = h.i64[lo:hi]
	}
	return s
}

// poison fills h with values an operation must overwrite.
func (h host) poison() {
	for i := range h.f32 {
		h.f32[i] = float32(math.NaN())
	}
	for i := range h.i32 {
		h.i32[i] = math.MinInt32 + 17
	}
	for i := range h.i64 {
		h.i64[i] = math.MinInt64 + 17
	}
}

// value is element i of rank r's input for a case: floats in [-1, 1),
// integers of either sign, small enough that sums of a few ranks do not
// wrap (wrapping is still defined and would be checked exactly).
func value(dt backend.DType, seed uint64, r, i int) (f float32, n int64) {
	h := rng.Hash(rng.Derive(seed, uint64(r)), uint64(i))
	switch dt {
	case backend.Float32:
		return float32(int32(h>>40)-1<<23) / (1 << 23), 0
	case backend.Int32:
		return 0, int64(int32(h) >> 3)
	}
	return 0, int64(h) >> 3
}

// fill writes rank r's input for a case into h, starting at element
// index off of the rank's logical input.
func fill(h host, seed uint64, r, off int) {
	for i := range h.f32 {
		h.f32[i], _ = value(backend.Float32, seed, r, off+i)
	}
	for i := range h.i32 {
		_, v := value(backend.Int32, seed, r, off+i)
		h.i32[i] = int32(v)
	}
	for i := range h.i64 {
		_, h.i64[i] = value(backend.Int64, seed, r, off+i)
	}
}

func (h host) at(i int) string {
	switch h.dt {
	case backend.Float32:
		return fmt.Sprint(h.f32[i])
	case backend.Int32:
		return fmt.Sprint(h.i32[i])
	}
	return fmt.Sprint(h.i64[i])
}

// equalAt compares element i exactly (NaN equals NaN).
func equalAt(a, b host, i, j int) bool {
	switch a.dt {
	case backend.Float32:
		x, y := a.f32[i], b.f32[j]
		return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
	case backend.Int32:
		return a.i32[i] == b.i32[j]
	}
	return a.i64[i] == b.i64[j]
}

// hash is an FNV-1a hash of h's bytes, for cross-rank comparison.
func (h host) hash() int64 {
	x := uint64(14695981039346656037)
	for _, b := range h.buf().Bytes() {
		x ^= uint64(b)
		x *= 1099511628211
	}
	return int64(x)
}
