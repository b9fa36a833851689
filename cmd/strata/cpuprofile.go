package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a Go CPU profile of the whole command to path
// (STRATA_CPU_PROFILE; `go tool pprof` reads it) and returns what stops
// it; time in the driver's calls shows under purego's syscalls. An empty
// path profiles nothing; a profile that cannot start says why on w and
// the command runs without it.
func startCPUProfile(path string, w io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(w, "strata: STRATA_CPU_PROFILE: %v (running without a profile)\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(w, "strata: STRATA_CPU_PROFILE: %v\n", err)
		}
	}
}
