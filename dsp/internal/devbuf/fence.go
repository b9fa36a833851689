package devbuf

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Fence marks a point in a device's queue and waits for it without
// holding the device's lock, so that the other pipeline stages of the
// device keep queueing work while one stage waits (back-end methods that
// wait, such as Download, hold the lock for the whole wait). One Mark at
// a time: Wait for it before marking again. Not safe for concurrent use.
// It is the back end's backend.Fence; on the CPU back end it is always
// reached.
type Fence struct {
	f backend.Fence
}

// NewFence returns a fence on dev's queue (dev must implement
// backend.Fences).
func NewFence(dev backend.Backend) (*Fence, error) {
	if dev == nil {
		return nil, fmt.Errorf("devbuf: fence on a nil device")
	}
	fs, ok := dev.(backend.Fences)
	if !ok {
		return nil, fmt.Errorf("devbuf: %s has no fences (backend.Fences)", dev.Name())
	}
	f, err := fs.NewFence()
	if err != nil {
		return nil, err
	}
	return &Fence{f: f}, nil
}

// Mark records the fence at the current end of the queue; call it
// inside Enqueue, after the work to wait for has been queued there.
func (f *Fence) Mark(q backend.Queue) error { return q.Mark(f.f) }

// Record is Mark under its own lock.
func (f *Fence) Record() error { return f.f.Record() }

// Wait blocks until the queue has run everything queued before the last
// Mark, without the device lock.
func (f *Fence) Wait() error { return f.f.Wait() }

// Close releases the fence.
func (f *Fence) Close() error {
	if f == nil || f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}
