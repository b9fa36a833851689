//go:build unix

package graph_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time so far, to report work
// per batch independently of how busy the machine is.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
