package cuda

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxParams is the most kernel parameters Launch accepts.
const MaxParams = 32

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// D1 returns the one-dimensional shape (x, 1, 1).
func D1(x int) Dim3 { return Dim3{uint32(x), 1, 1} }

// Kernel parameter encoders: every parameter travels as 8 bytes; 4-byte C
// types (int, unsigned, float) read the low half (little endian).
func F32(v float32) uint64 { return uint64(math.Float32bits(v)) }

// I32 encodes an int parameter.
func I32(v int32) uint64 { return uint64(uint32(v)) }

// I64 encodes a long long parameter.
func I64(v int64) uint64 { return uint64(v) }

// P encodes a device pointer parameter.
func P(p DevPtr) uint64 { return uint64(p) }

// paramBlock is one page outside the Go heap holding MaxParams 8-byte
// values followed by MaxParams pointers to them (the void** kernelParams
// that cuLaunchKernel reads during the call).
type paramBlock struct {
	mem  []byte
	vals *[MaxParams]uint64
	ptrs *[MaxParams]uintptr
}

var (
	paramMu   sync.Mutex
	paramFree []*paramBlock
)

func getParams() (*paramBlock, error) {
	paramMu.Lock()
	if n := len(paramFree); n > 0 {
		b := paramFree[n-1]
		paramFree = paramFree[:n-1]
		paramMu.Unlock()
		return b, nil
	}
	paramMu.Unlock()
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cuda: mmap for kernel parameters: %w", err)
	}
	b := &paramBlock{mem: mem}
	b.vals = (*[MaxParams]uint64)(unsafe.Pointer(&mem[0]))
	b.ptrs = (*[MaxParams]uintptr)(unsafe.Pointer(&mem[8*MaxParams]))
	for i := range b.ptrs {
		b.ptrs[i] = uintptr(unsafe.Pointer(&b.vals[i]))
	}
	return b, nil
}

func putParams(b *paramBlock) {
	paramMu.Lock()
	paramFree = append(paramFree, b)
	paramMu.Unlock()
}

// Launch runs f on stream s. args are encoded with F32, I32, I64 and P, in
// the kernel's parameter order. The driver copies the values during the
// call, so nothing needs to outlive it.
func Launch(f Function, grid, block Dim3, sharedBytes uint32, s Stream, args ...uint64) error {
	if len(args) > MaxParams {
		return fmt.Errorf("cuda: Launch: %d parameters, at most %d", len(args), MaxParams)
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 {
		return nil // nothing to do; the driver would reject an empty grid
	}
	pb, err := getParams()
	if err != nil {
		return err
	}
	copy(pb.vals[:], args)
	r := syscall(drv.cuLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedBytes), uintptr(s), uintptr(unsafe.Pointer(&pb.ptrs[0])), 0)
	putParams(pb)
	return check("cuLaunchKernel", r)
}
