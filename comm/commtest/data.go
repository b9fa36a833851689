package commtest

import (
	"fmt"
	"math"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// host is a typed host slice of one dtype: a case's inputs, expected and
// received values.
type host struct {
	dt  backend.DType
	f32 []float32
	i32 []int32
	i64 []int64
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

// slice is the typed slice, for Upload and Download.
func (h host) slice() any {
	switch h.dt {
	case backend.Float32:
		return h.f32
	case backend.Int32:
		return h.i32
	}
	return h.i64
}

func (h host) len() int { return len(h.f32) + len(h.i32) + len(h.i64) }

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

// hash is an FNV-1a hash of h's elements, for cross-rank comparison.
func (h host) hash() int64 {
	x := uint64(14695981039346656037)
	mix := func(v uint64, bytes int) {
		for k := 0; k < bytes; k++ {
			x ^= v >> (8 * k) & 0xff
			x *= 1099511628211
		}
	}
	for _, v := range h.f32 {
		mix(uint64(math.Float32bits(v)), 4)
	}
	for _, v := range h.i32 {
		mix(uint64(uint32(v)), 4)
	}
	for _, v := range h.i64 {
		mix(uint64(v), 8)
	}
	return int64(x)
}

var (
	cpuOnce sync.Once
	cpuBE   backend.Backend
	cpuErr  error
)

// orCPU returns be, or for nil the CPU back end (the host communicators'
// buffers).
func orCPU(be backend.Backend) (backend.Backend, error) {
	if be != nil {
		return be, nil
	}
	cpuOnce.Do(func() { cpuBE, cpuErr = cpu.New(cpu.Options{}) })
	return cpuBE, cpuErr
}

// bufs makes the back-end buffers of one case (from the communicator's
// Alloc when cm is set, else from the back end) and frees them.
type bufs struct {
	be   backend.Backend
	cm   comm.Comm // Alloc from it when not nil
	list []backend.Buffer
	from []bool // list[i] came from cm.Alloc
}

// put allocates a buffer of h's dtype and length and copies h into it.
func (d *bufs) put(h host) (backend.Buffer, error) {
	var b backend.Buffer
	var err error
	if d.cm != nil {
		b, err = d.cm.Alloc(h.dt, h.len())
	} else {
		b, err = d.be.Alloc(h.dt, h.len())
	}
	if err != nil {
		return nil, err
	}
	d.list = append(d.list, b)
	d.from = append(d.from, d.cm != nil)
	if h.len() > 0 {
		if err := d.be.Upload(b, h.slice()); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// get copies b into h.
func (d *bufs) get(h host, b backend.Buffer) error {
	if h.len() == 0 {
		return nil
	}
	return d.be.Download(h.slice(), b)
}

// free releases the buffers (Free errors are reported).
func (d *bufs) free() error {
	var err error
	for i, b := range d.list {
		if d.from[i] {
			if e := d.cm.Free(b); e != nil && err == nil {
				err = e
			}
		} else {
			d.be.Free(b)
		}
	}
	d.list, d.from = nil, nil
	return err
}
