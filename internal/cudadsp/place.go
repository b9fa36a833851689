package cudadsp

import (
	"fmt"
	"unsafe"

	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// placer copies host arrays to a device, or into mapped pinned host
// memory read through UVA, and frees them: the layer-wise and walk
// machines' own copies of a patch's rows.
type placer struct {
	dev   sampleDevice
	owned []backend.Buffer
	hosts []backend.HostBuffer
}

// place copies data ([]int64, []int32 or []float64) and returns it as
// a kernel argument: its device buffer, or its device address when
// mapped (the address 0 for no elements).
func (p *placer) place(data any, mapped bool) (backend.Arg, error) {
	var n, size int
	var ptr unsafe.Pointer
	switch v := data.(type) {
	case []int64:
		n, size = len(v), 8
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	case []int32:
		n, size = len(v), 4
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	case []float64:
		n, size = len(v), 8
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	default:
		return backend.Arg{}, fmt.Errorf("cudadsp: place %T", data)
	}
	if n == 0 {
		return backend.Arg{}, nil
	}
	if mapped {
		h, err := p.dev.AllocPinned(uint64(n*size), true)
		if err != nil {
			return backend.Arg{}, err
		}
		p.hosts = append(p.hosts, h)
		copy(h.Bytes(), unsafe.Slice((*byte)(ptr), n*size))
		return backend.Addr(h.DeviceAddr()), nil
	}
	var b backend.Buffer
	err := p.dev.Enqueue(func(l backend.Queue) error {
		var err error
		if size == 8 {
			if b, err = l.AllocRaw(backend.Int64, n); err == nil {
				err = l.UploadFrom(b, unsafe.Slice((*int64)(ptr), n))
			}
		} else if b, err = l.AllocRaw(backend.Int32, n); err == nil {
			err = l.UploadFrom(b, unsafe.Slice((*int32)(ptr), n))
		}
		return err
	})
	if b != nil {
		p.owned = append(p.owned, b)
	}
	if err != nil {
		return backend.Arg{}, err
	}
	return backend.Buf(b), nil
}

// free releases everything placed.
func (p *placer) free() error {
	for _, b := range p.owned {
		p.dev.Free(b)
	}
	p.owned = nil
	var first error
	for _, h := range p.hosts {
		if err := h.Free(); first == nil {
			first = err
		}
	}
	p.hosts = nil
	return first
}

// mappedEdges is whether a placement keeps per-edge arrays in host
// memory (Mapped, and Split: these copies are not split by row).
func mappedEdges(pl gpusample.Placement) bool {
	return pl == gpusample.Mapped || pl == gpusample.Split
}
