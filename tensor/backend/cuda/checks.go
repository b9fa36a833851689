package cuda

import (
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// maxChecks is the number of index checks that may be pending between two
// synchronizations; one more forces a synchronization first. A training
// step queues about ten, and a pipelined loop synchronizes rarely.
const maxChecks = 1024

// checker validates index arguments on the device without a round trip:
// each checked argument gets a slot that its kernel sets (atomicMax of
// 2^62 - pos, so the smallest bad position wins) and the next
// Synchronize reads all slots at once and reports the first failure as a
// *backend.IndexError.
type checker struct {
	slots    cu.DevPtr // maxChecks uint64 on the device
	pending  []pendingCheck
	deferred error // an error found while flushing early, reported at the next Synchronize
}

type pendingCheck struct {
	op, name string
	idx      *Buffer // int32 buffer being checked
	limit    int
}

func (c *checker) init(d *Device) error {
	p, err := cu.MemAlloc(maxChecks * 8)
	if err != nil {
		return err
	}
	c.slots = p
	return cu.MemsetD8Async(p, 0, maxChecks*8, d.stream)
}

// slot reserves a slot for checking idx (int32, each in [0, limit)) in
// op's argument name, and returns its device address. Callers hold the
// Device lock.
func (c *checker) slot(d *Device, op, name string, idx *Buffer, limit int) (uint64, error) {
	if len(c.pending) == maxChecks {
		if err := d.stream.Synchronize(); err != nil {
			return 0, err
		}
		if err := c.flush(d); err != nil && c.deferred == nil {
			c.deferred = err
		}
	}
	c.pending = append(c.pending, pendingCheck{op: op, name: name, idx: idx, limit: limit})
	return uint64(c.slots) + 8*uint64(len(c.pending)-1), nil
}

// flush reads the slots of pending checks (the stream must be idle) and
// returns the first index error, or an error deferred by an earlier flush.
func (c *checker) flush(d *Device) error {
	if len(c.pending) == 0 {
		err := c.deferred
		c.deferred = nil
		return err
	}
	n := uint64(len(c.pending))
	stage := unsafe.Add(d.host, offSlots)
	if err := cu.MemcpyDtoHAsync(stage, c.slots, 8*n, d.stream); err != nil {
		return err
	}
	if err := d.stream.Synchronize(); err != nil {
		return err
	}
	vals := unsafe.Slice((*uint64)(stage), n)
	var found error
	for i, pc := range c.pending {
		if vals[i] == 0 {
			continue
		}
		pos := int64(1<<62 - vals[i])
		ie := &backend.IndexError{Op: pc.op, Name: pc.name, Pos: int(pos), Value: -1, Limit: pc.limit}
		if pc.idx != nil && pc.idx.ptr != 0 && pos >= 0 && pos < int64(pc.idx.n) {
			res := unsafe.Add(d.host, offResult)
			if cu.MemcpyDtoHAsync(res, pc.idx.ptr+cu.DevPtr(4*pos), 4, d.stream) == nil && d.stream.Synchronize() == nil {
				ie.Value = int64(*(*int32)(res))
			}
		}
		found = ie
		break
	}
	c.pending = c.pending[:0]
	if err := cu.MemsetD8Async(c.slots, 0, 8*n, d.stream); err != nil && found == nil {
		found = err
	}
	if c.deferred != nil {
		found, c.deferred = c.deferred, nil
	}
	return found
}

// The slots' staging area must fit in the pinned scratch.
var _ = [hostScratchBytes - offSlots - 8*maxChecks]struct{}{}
