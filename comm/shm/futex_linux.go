//go:build linux

package shm

import (
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

// wait sleeps while *addr == val, at most d.
func wait32(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wake wakes every waiter on addr.
func wake32(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<30), 0, 0, 0)
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return true
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	b, err := readStat(pid)
	if err != nil {
		return true // cannot tell: assume alive; the deadline still bounds the wait
	}
	// The state follows the last ')' of "pid (comm) S ...".
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			if i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
				return false
			}
			break
		}
	}
	return true
}
