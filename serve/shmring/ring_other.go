//go:build !linux

package shmring

import (
	"errors"
	"fmt"
	"runtime"
)

// Ring is a ring file mapped by its writer (Linux only).
type Ring struct {
	Path   string
	Header RingHeader
}

// Create fails: the ring needs Linux (fallocate, /dev/shm).
func Create(dir string, slots int, slotBytes int64) (*Ring, error) {
	return nil, fmt.Errorf("shmring: shared-memory rings are not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Slot returns nil.
func (r *Ring) Slot(k int) []byte { return nil }

// Close does nothing.
func (r *Ring) Close() error { return nil }

// Free fails: no rings here.
func Free(dir string) (int64, error) { return 0, errors.ErrUnsupported }

// Supported reports whether rings can be made on this system.
const Supported = false
