package devbuf

import (
	"fmt"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// Fence marks a point in a CUDA device's stream and waits for it without
// holding the device's lock, so that the other pipeline stages of the
// device keep queueing work while one stage waits (cuda.Device methods
// that wait, such as Download, hold the lock for the whole wait). One
// Mark at a time: Wait for it before marking again. Not safe for
// concurrent use.
type Fence struct {
	dev *cuda.Device
	cd  cu.Device
	ctx cu.Context
	ev  cu.Event
}

// NewFence returns a fence on dev's stream.
func NewFence(dev *cuda.Device) (*Fence, error) {
	if dev == nil {
		return nil, fmt.Errorf("devbuf: fence on a nil device")
	}
	f := &Fence{dev: dev}
	var err error
	if f.cd, err = cu.GetDevice(dev.Ordinal()); err != nil {
		return nil, err
	}
	if f.ctx, err = f.cd.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	if err := dev.Do(func(*cuda.Locked) error {
		var e error
		f.ev, e = cu.EventCreate(cu.EventDisableTiming)
		return e
	}); err != nil {
		f.cd.PrimaryCtxRelease()
		return nil, err
	}
	return f, nil
}

// Mark records the fence at the current end of the stream; call it
// inside dev.Do, after the work to wait for has been queued there.
func (f *Fence) Mark(l *cuda.Locked) error { return f.ev.Record(l.Stream()) }

// Record is Mark under its own lock.
func (f *Fence) Record() error { return f.dev.Do(f.Mark) }

// Wait blocks until the stream has run everything queued before the last
// Mark, without the device lock.
func (f *Fence) Wait() error {
	unbind, err := f.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	return f.ev.Synchronize()
}

// Close destroys the event and releases the context reference.
func (f *Fence) Close() error {
	if f == nil || f.ctx == 0 {
		return nil
	}
	err := f.dev.Do(func(*cuda.Locked) error { return f.ev.Destroy() })
	if e := f.cd.PrimaryCtxRelease(); err == nil {
		err = e
	}
	f.ctx = 0
	return err
}
