//go:build linux

package segment

import (
	"sync/atomic"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// A flag that publishes data (a filled slot) carries, in the rest of its
// cache line, a header saying what the data is: the operation's sequence
// number, kind, phase and dtype, its element count (comm.Call.Count) and
// the element count of the writer's own block. The writer stores it with
// SetHeader before Set; a reader loads it with GetHeader once the flag
// has reached the value it waited for, and the slot is not rewritten
// before every reader is done with it. Sharing the flag's cache line, the
// header costs no extra transfer between cores.
const (
	hdrSeq   = 8
	hdrCount = 16
	hdrBlock = 24
	hdrOp    = 32 // op | phase<<8 | dtype<<16
)

// Header is a slot header.
type Header struct {
	Desc  comm.Desc
	Block int64 // elements of the writer's own block (AllGatherV); 0 if unused
}

// HeaderOf is the header of c's data, with block the writer's own block.
func HeaderOf(c *comm.Call, block int64) Header {
	return Header{Desc: comm.DescOf(c), Block: block}
}

// SetHeader stores h in flag f's cache line.
func SetHeader(f *uint32, h Header) {
	p := unsafe.Pointer(f)
	atomic.StoreUint64((*uint64)(unsafe.Add(p, hdrSeq)), h.Desc.Seq)
	atomic.StoreInt64((*int64)(unsafe.Add(p, hdrCount)), h.Desc.Count)
	atomic.StoreInt64((*int64)(unsafe.Add(p, hdrBlock)), h.Block)
	atomic.StoreUint32((*uint32)(unsafe.Add(p, hdrOp)), uint32(h.Desc.Op)|uint32(h.Desc.Phase)<<8|uint32(h.Desc.DType)<<16)
}

// GetHeader loads the header in flag f's cache line.
func GetHeader(f *uint32) Header {
	p := unsafe.Pointer(f)
	op := atomic.LoadUint32((*uint32)(unsafe.Add(p, hdrOp)))
	return Header{
		Desc: comm.Desc{
			Seq:   atomic.LoadUint64((*uint64)(unsafe.Add(p, hdrSeq))),
			Op:    comm.Op(op & 0xff),
			Phase: comm.Phase(op >> 8 & 0xff),
			DType: backend.DType(op >> 16),
			Count: atomic.LoadInt64((*int64)(unsafe.Add(p, hdrCount))),
		},
		Block: atomic.LoadInt64((*int64)(unsafe.Add(p, hdrBlock))),
	}
}
