//go:build linux

package segment

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations (x/sys/unix has no names for them). The non-private
// forms, because the words are shared between processes.
const (
	futexWait = 0
	futexWake = 1
)

// Wait32 sleeps while *addr == val, at most d.
func Wait32(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake32 wakes every waiter on addr.
func Wake32(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<30), 0, 0, 0)
}

// Waiters is the word after a flag's value: sleepers count themselves in
// it so that Set skips the wake syscall when nobody sleeps.
func Waiters(f *uint32) *uint32 { return (*uint32)(unsafe.Add(unsafe.Pointer(f), 4)) }

// Set publishes v and wakes sleepers.
func Set(f *uint32, v uint32) {
	atomic.StoreUint32(f, v)
	if atomic.LoadUint32(Waiters(f)) != 0 {
		Wake32(f)
	}
}

// Reached reports v >= want on a wrapping counter.
func Reached(v, want uint32) bool { return int32(v-want) >= 0 }

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 {
		return true
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // cannot tell: assume alive; the deadline still bounds the wait
	}
	// The state follows the last ')' of "pid (comm) S ...".
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return !(i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X'))
		}
	}
	return true
}
