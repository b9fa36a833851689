// Package devbuf has the small buffer helpers the device-side DSP packages
// (dsp/gpucache, dsp/gpurun) share: views into back-end buffers and
// uploads of host slices, for the CUDA and the CPU back end.
package devbuf

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// View aliases elements [off, off+n) of b (a CUDA or CPU buffer of
// float32, int32 or int64). The view owns no memory: never free it, and
// do not use it after b is freed.
func View(b backend.Buffer, off, n int) (backend.Buffer, error) {
	if b == nil || off < 0 || n < 0 || off > b.Len() || n > b.Len()-off {
		return nil, fmt.Errorf("devbuf: view [%d, %d+%d) of a %d-element buffer", off, off, n, lenOf(b))
	}
	switch x := b.(type) {
	case *cuda.Buffer:
		return x.View(off, n), nil
	case *cpu.Buffer:
		switch x.DType() {
		case backend.Float32:
			return cpu.WrapF32(cpu.F32(x)[off : off+n : off+n]), nil
		case backend.Int32:
			return cpu.WrapI32(cpu.I32(x)[off : off+n : off+n]), nil
		case backend.Int64:
			return cpu.WrapI64(cpu.I64(x)[off : off+n : off+n]), nil
		}
	}
	return nil, fmt.Errorf("devbuf: cannot take views of %T buffers of %v", b, b.DType())
}

func lenOf(b backend.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Len()
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
	buf, err := b.Alloc(dt, len(v))
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
