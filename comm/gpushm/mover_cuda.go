package gpushm

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/strata-gnn/strata/comm/internal/cuquery"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// cudaMover copies with the GPU's copy engines on two streams of its own
// (device-to-host and host-to-device run concurrently), into and out of
// the segment's data region, which it page-locks with cuMemHostRegister
// so the copies are asynchronous.
type cudaMover struct {
	dev       *cuda.Device
	cudev     cu.Device
	ctx       cu.Context
	sIn, sOut cu.Stream
	begun     cu.Event
	in, out   []cu.Event
	region    unsafe.Pointer
}

func newCudaMover(dev *cuda.Device, region []byte, slots int) (m *cudaMover, err error) {
	if len(region) == 0 {
		return nil, errors.New("gpushm: empty segment")
	}
	if err := cuquery.Load(); err != nil {
		return nil, err
	}
	m = &cudaMover{dev: dev}
	if m.cudev, err = cu.GetDevice(dev.Ordinal()); err != nil {
		return nil, err
	}
	if m.ctx, err = m.cudev.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	unbind, err := m.ctx.Bind()
	defer unbind()
	if err != nil {
		m.cudev.PrimaryCtxRelease()
		return nil, err
	}
	fail := func(e error) (*cudaMover, error) {
		m.release()
		return nil, e
	}
	if m.sIn, err = cu.StreamCreate(cu.StreamNonBlocking); err != nil {
		return fail(err)
	}
	if m.sOut, err = cu.StreamCreate(cu.StreamNonBlocking); err != nil {
		return fail(err)
	}
	if m.begun, err = cu.EventCreate(cu.EventDisableTiming); err != nil {
		return fail(err)
	}
	for i := 0; i < slots; i++ {
		a, err := cu.EventCreate(cu.EventDisableTiming)
		if err != nil {
			return fail(err)
		}
		m.in = append(m.in, a)
		b, err := cu.EventCreate(cu.EventDisableTiming)
		if err != nil {
			return fail(err)
		}
		m.out = append(m.out, b)
	}
	p := unsafe.Pointer(unsafe.SliceData(region))
	if err := cu.MemHostRegister(p, uint64(len(region)), cu.HostRegisterPortable); err != nil {
		return fail(fmt.Errorf("gpushm: page-locking the %d-byte shared segment: %w", len(region), err))
	}
	m.region = p
	return m, nil
}

// release frees what newCudaMover made; the context must be current.
func (m *cudaMover) release() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, s := range []cu.Stream{m.sIn, m.sOut} {
		if s != 0 {
			keep(s.Synchronize())
		}
	}
	if m.region != nil {
		keep(cu.MemHostUnregister(m.region))
		m.region = nil
	}
	for _, e := range append(append([]cu.Event{m.begun}, m.in...), m.out...) {
		if e != 0 {
			keep(e.Destroy())
		}
	}
	m.in, m.out, m.begun = nil, nil, 0
	for _, s := range []cu.Stream{m.sIn, m.sOut} {
		if s != 0 {
			keep(s.Destroy())
		}
	}
	m.sIn, m.sOut = 0, 0
	keep(m.cudev.PrimaryCtxRelease())
	return first
}

func (m *cudaMover) close() error {
	unbind, err := m.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	return m.release()
}

func (m *cudaMover) bind() (func(), error) { return m.ctx.Bind() }

func devPtr(b backend.Buffer) (cu.DevPtr, error) {
	cb, ok := b.(*cuda.Buffer)
	if !ok {
		return 0, fmt.Errorf("gpushm: %T is not a CUDA buffer", b)
	}
	return cb.Ptr(), nil
}

func (m *cudaMover) begin(buf backend.Buffer) error {
	if err := m.dev.Do(func(l *cuda.Locked) error { return m.begun.Record(l.Stream()) }); err != nil {
		return err
	}
	if err := m.sIn.WaitEvent(m.begun); err != nil {
		return err
	}
	return m.sOut.WaitEvent(m.begun)
}

func (m *cudaMover) toHost(s int, dst []byte, buf backend.Buffer, off int) error {
	p, err := devPtr(buf)
	if err != nil {
		return err
	}
	if len(dst) == 0 {
		return m.in[s].Record(m.sIn)
	}
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), p+cu.DevPtr(off), uint64(len(dst)), m.sIn); err != nil {
		return err
	}
	return m.in[s].Record(m.sIn)
}

func (m *cudaMover) toDevice(s int, buf backend.Buffer, off int, src []byte) error {
	p, err := devPtr(buf)
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return m.out[s].Record(m.sOut)
	}
	if err := cu.MemcpyHtoDAsync(p+cu.DevPtr(off), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), m.sOut); err != nil {
		return err
	}
	return m.out[s].Record(m.sOut)
}

func (m *cudaMover) inDone(s int) (bool, error)  { return cuquery.Done(m.in[s]) }
func (m *cudaMover) outDone(s int) (bool, error) { return cuquery.Done(m.out[s]) }
