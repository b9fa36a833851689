package cudacomm

import (
	"fmt"
	"strings"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// IsGPU reports whether be is a handle of a CUDA GPU (of
// tensor/backend/cuda). It calls no CUDA function.
func IsGPU(be backend.Backend) bool {
	d, ok := be.(*cuda.Device)
	return ok && d != nil
}

func name(be backend.Backend) string {
	if be == nil {
		return "no device"
	}
	return be.Name()
}

// GPU is a CUDA device as a communicator drives it: it holds a
// reference to the device's primary context, which the communicator makes
// current on its own threads for NCCL and to poll its events without the
// device's lock.
type GPU struct {
	dev *cuda.Device
	cd  cu.Device
	ctx cu.Context
}

// Retain returns the GPU of be, a CUDA device, with a reference to its
// primary context (Release drops it).
func Retain(be backend.Backend) (*GPU, error) {
	dev, ok := be.(*cuda.Device)
	if !ok || dev == nil {
		return nil, fmt.Errorf("cudacomm: %s is not a CUDA device", name(be))
	}
	g := &GPU{dev: dev}
	var err error
	if g.cd, err = cu.GetDevice(dev.Ordinal()); err != nil {
		return nil, err
	}
	if g.ctx, err = g.cd.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	return g, nil
}

// Bind locks the calling goroutine to its thread with the GPU's context
// current there and returns the undo, which is returned even on error.
func (g *GPU) Bind() (func(), error) { return g.ctx.Bind() }

// Bound runs f on this goroutine's thread with the GPU's context current.
func (g *GPU) Bound(f func() error) error {
	unbind, err := g.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	return f()
}

// Release drops the context reference, once (with the context current,
// as Bound makes it).
func (g *GPU) Release() error {
	if g.ctx == 0 {
		return nil
	}
	g.ctx = 0
	return g.cd.PrimaryCtxRelease()
}

// Stream is a CUDA stream (a CUstream, also a cudaStream_t), for libraries
// that queue work on it.
type Stream uintptr

// Enqueue runs f with the device locked and its context current, giving
// it the device's queue and that queue's stream: what f queues on either
// runs in the device's order (see backend.Enqueuer).
func (g *GPU) Enqueue(f func(q backend.Queue, s Stream) error) error {
	return g.dev.Do(func(l *cuda.Locked) error {
		return l.Timed("collective", func() error { return f(l, Stream(l.Stream())) })
	})
}

// Addr returns the device address of b's first element, where b is a
// buffer of a CUDA GPU (0 for other buffers and empty ones).
func Addr(b backend.Buffer) uint64 {
	cb, ok := b.(*cuda.Buffer)
	if !ok {
		return 0
	}
	return uint64(cb.Ptr())
}

// Event marks a point in a stream, polled without the device's lock.
type Event struct{ ev cu.Event }

// NewEvent creates an event (without timing) in the GPU's context.
func (g *GPU) NewEvent() (Event, error) {
	var e Event
	err := g.Bound(func() error {
		var err error
		e.ev, err = cu.EventCreate(cu.EventDisableTiming)
		return err
	})
	return e, err
}

// Record marks the current end of s.
func (e Event) Record(s Stream) error { return e.ev.Record(cu.Stream(s)) }

// Done reports whether the work before the last Record has completed
// (Load first; with the context current).
func (e Event) Done() (bool, error) { return eventDone(e.ev) }

// Destroy destroys the event (with the context current); destroying the
// zero Event does nothing.
func (e Event) Destroy() error {
	if e.ev == 0 {
		return nil
	}
	return e.ev.Destroy()
}

// BusID returns the PCI address of be's GPU ("0000:1b:00.0").
func BusID(be backend.Backend) (string, error) {
	dev, ok := be.(*cuda.Device)
	if !ok || dev == nil {
		return "", fmt.Errorf("cudacomm: %s is not a CUDA device", name(be))
	}
	d, err := cu.GetDevice(dev.Ordinal())
	if err != nil {
		return "", err
	}
	return d.PCIBusID()
}

// CanAccess reports whether be's GPU can access the memory of the GPU at
// PCI address peer directly (peer-to-peer); visible is false when no GPU
// this process sees is at that address.
func CanAccess(be backend.Backend, peer string) (visible, ok bool) {
	dev, isGPU := be.(*cuda.Device)
	if !isGPU || dev == nil {
		return false, false
	}
	me, err := cu.GetDevice(dev.Ordinal())
	if err != nil {
		return false, false
	}
	n, err := cu.DeviceCount()
	if err != nil {
		return false, false
	}
	for i := 0; i < n; i++ {
		d, err := cu.GetDevice(i)
		if err != nil {
			continue
		}
		if b, err := d.PCIBusID(); err != nil || !strings.EqualFold(b, peer) {
			continue
		}
		can, err := cu.CanAccessPeer(me, d)
		return true, err == nil && can
	}
	return false, false
}
