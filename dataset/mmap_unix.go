//go:build unix

package dataset

import (
	"os"

	"golang.org/x/sys/unix"
)

const canMmap = true

// mmapFile maps size bytes of f read-only and shared.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

func munmap(b []byte) error { return unix.Munmap(b) }
