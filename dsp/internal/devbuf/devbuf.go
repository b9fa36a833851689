// Package devbuf has the small buffer helpers the device-side DSP packages
// (dsp/cache, dsp/engine) share: views into back-end buffers, uploads
// of host slices and fences, for any back end with the capabilities of
// package backend (the CUDA and the CPU back end).
package devbuf

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// View aliases elements [off, off+n) of b (backend.View: a buffer of any
// dtype whose type implements backend.Slicer). The view owns no memory:
// never free it, and do not use it after b is freed.
func View(b backend.Buffer, off, n int) (backend.Buffer, error) {
	v, err := backend.View(b, off, n)
	if err != nil {
		return nil, fmt.Errorf("devbuf: %w", err)
	}
	return v, nil
}

// AllocRaw is b.Alloc without the zero fill on back ends that can skip
// it (the CUDA back end's AllocRaw: no memset launch), for a buffer the
// caller overwrites completely before reading it.
func AllocRaw(b backend.Backend, dt backend.DType, n int) (backend.Buffer, error) {
	if ra, ok := b.(interface {
		AllocRaw(backend.DType, int) (backend.Buffer, error)
	}); ok {
		return ra.AllocRaw(dt, n)
	}
	return b.Alloc(dt, n)
}

// Upload allocates a buffer on b holding v.
func Upload[T int32 | float32 | int64](b backend.Backend, v []T) (backend.Buffer, error) {
	var dt backend.DType
	switch any(v).(type) {
	case []int32:
		dt = backend.Int32
	case []int64:
		dt = backend.Int64
	default:
		dt = backend.Float32
	}
	buf, err := AllocRaw(b, dt, len(v)) // Upload writes every element
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return buf, nil
	}
	if err := b.Upload(buf, v); err != nil {
		b.Free(buf)
		return nil, err
	}
	return buf, nil
}
