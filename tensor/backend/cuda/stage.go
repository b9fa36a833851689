package cuda

import (
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
)

// A copy from pageable (Go) memory makes the driver synchronize the
// stream first, so every Upload would stall the host until the GPU is
// idle. Uploads up to stageMax bytes are instead copied into a pinned
// ring and queued asynchronously; an event per upload tells when its ring
// space may be reused. The host then runs ahead of the GPU by up to
// stageBytes of uploads.
const (
	stageBytes = 64 << 20
	stageMax   = 16 << 20
)

type staged struct {
	start, end uint64
	ev         cu.Event
}

// stager is the pinned upload ring of a Device (callers hold the lock).
type stager struct {
	host   unsafe.Pointer
	head   uint64
	fifo   []staged   // queued uploads in ring order
	events []cu.Event // idle events for reuse
}

func (s *stager) init() error {
	p, err := cu.MemHostAlloc(stageBytes, cu.HostAllocPortable)
	if err != nil {
		return err
	}
	s.host = p
	return nil
}

// upload queues n bytes from src to dst through the ring.
func (s *stager) upload(d *Device, dst cu.DevPtr, src unsafe.Pointer, n uint64) error {
	// Live data is [tail, head) around the ring, tail = fifo[0].start.
	start := (s.head + 255) &^ 255
	wrap := start+n > stageBytes
	if wrap {
		start = 0
	}
	end := start + n
	for len(s.fifo) > 0 {
		tail := s.fifo[0].start
		busy := tail >= s.head && tail < end // live data runs from tail over [start, end)
		if wrap {
			busy = tail >= s.head || tail < end // live data covers 0, or starts below end
		}
		if !busy {
			break
		}
		f := s.fifo[0]
		if err := f.ev.Synchronize(); err != nil {
			return err
		}
		s.events = append(s.events, f.ev)
		s.fifo = s.fifo[1:]
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(s.host, start)), n), unsafe.Slice((*byte)(src), n))
	if err := cu.MemcpyHtoDAsync(dst, unsafe.Add(s.host, start), n, d.stream); err != nil {
		return err
	}
	var ev cu.Event
	if k := len(s.events); k > 0 {
		ev, s.events = s.events[k-1], s.events[:k-1]
	} else {
		var err error
		if ev, err = cu.EventCreate(cu.EventDisableTiming); err != nil {
			return err
		}
	}
	if err := ev.Record(d.stream); err != nil {
		return err
	}
	s.fifo = append(s.fifo, staged{start: start, end: end, ev: ev})
	s.head = end
	return nil
}

// release frees the ring and its events (the stream must be idle).
func (s *stager) release() error {
	var first error
	for _, f := range s.fifo {
		s.events = append(s.events, f.ev)
	}
	s.fifo = nil
	for _, e := range s.events {
		if err := e.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	s.events = nil
	if s.host != nil {
		if err := cu.MemFreeHost(s.host); err != nil && first == nil {
			first = err
		}
		s.host = nil
	}
	return first
}
