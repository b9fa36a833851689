package cuda

import "fmt"

// Stream memory operations: a stream waits for a 32-bit word in device-
// accessible memory (device memory, or host memory registered or
// allocated as mapped, addressed by its device pointer) to reach a value,
// or writes one, without the host taking part. They let one GPU's stream
// wait for a flag another process's GPU (or host) sets.

// Wait conditions (CUstreamWaitValue_flags).
const (
	// WaitValueGEQ waits until (int32)(*addr - value) >= 0, a cyclic
	// greater-or-equal.
	WaitValueGEQ = 0
	// WaitValueEQ waits until *addr == value.
	WaitValueEQ = 1
)

// WriteValueDefault orders the write after all earlier work of the stream
// with a system-wide memory fence (CU_STREAM_WRITE_VALUE_DEFAULT).
const WriteValueDefault = 0

// StreamMemOps reports whether the driver has cuStreamWaitValue32 and
// cuStreamWriteValue32 (false before Load).
func StreamMemOps() bool {
	return drv != nil && drv.cuStreamWaitValue32 != 0 && drv.cuStreamWriteValue32 != 0
}

func memOps() error {
	if err := loaded(); err != nil {
		return err
	}
	if !StreamMemOps() {
		return fmt.Errorf("cuda: %s lacks cuStreamWaitValue32/cuStreamWriteValue32", drv.lib.Path)
	}
	return nil
}

// WaitValue32 makes later work on s wait until the word at addr meets the
// condition flags (WaitValueGEQ, WaitValueEQ) for v.
func (s Stream) WaitValue32(addr DevPtr, v uint32, flags uint32) error {
	if err := memOps(); err != nil {
		return err
	}
	return check("cuStreamWaitValue32", syscall(drv.cuStreamWaitValue32, uintptr(s), uintptr(addr), uintptr(v), uintptr(flags)))
}

// WriteValue32 writes v to the word at addr once the work queued on s
// before it has completed.
func (s Stream) WriteValue32(addr DevPtr, v uint32, flags uint32) error {
	if err := memOps(); err != nil {
		return err
	}
	return check("cuStreamWriteValue32", syscall(drv.cuStreamWriteValue32, uintptr(s), uintptr(addr), uintptr(v), uintptr(flags)))
}
