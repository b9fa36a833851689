//go:build linux

package nap

import (
	"time"

	"golang.org/x/sys/unix"
)

// Sleep sleeps for about d on this thread. An interrupted sleep returns
// early: callers poll again anyway.
func Sleep(d time.Duration) {
	// The slack is per thread: set it where we sleep (idempotent).
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(d))
	unix.Nanosleep(&ts, nil)
}
