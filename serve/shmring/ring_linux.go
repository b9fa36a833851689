//go:build linux

package shmring

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Ring is a ring file mapped by its writer.
type Ring struct {
	Path   string
	Header RingHeader
	f      *os.File
	mem    []byte
}

// Create makes a ring of slots x slotBytes in dir (a new file of mode
// 0600 with a random name), reserves its memory and maps it. An error
// wraps ErrNoSpace when dir's file system cannot hold it.
func Create(dir string, slots int, slotBytes int64) (*Ring, error) {
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("shmring: %w", err)
	}
	h := RingHeader{Slots: slots, SlotBytes: slotBytes, Nonce: binary.LittleEndian.Uint64(nb[:])}
	if err := h.Check(); err != nil {
		return nil, err
	}
	size := h.FileBytes()
	path := filepath.Join(dir, fmt.Sprintf("ring-%016x", h.Nonce))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shmring: %w", err)
	}
	fail := func(err error) (*Ring, error) {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	// Reserve every page now: on a full tmpfs a write through the mapping
	// would be a SIGBUS, fallocate is an error.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fail(fmt.Errorf("shmring: %s: %d bytes (%d slots of %d): %w", path, size, slots, slotBytes, ErrNoSpace))
		}
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return fail(fmt.Errorf("shmring: fallocate %s: %w", path, err))
		}
		if err := f.Truncate(size); err != nil {
			return fail(fmt.Errorf("shmring: %w", err))
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("shmring: mmap %s (%d bytes): %w", path, size, err))
	}
	copy(mem, h.Encode())
	return &Ring{Path: path, Header: h, f: f, mem: mem}, nil
}

// Slot returns the bytes of slot k.
func (r *Ring) Slot(k int) []byte {
	off := r.Header.SlotOffset(k)
	return r.mem[off : off+r.Header.SlotBytes : off+r.Header.SlotBytes]
}

// Close unmaps the ring and removes its file (if the reader has not).
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(r.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Free returns the bytes free for an unprivileged user on dir's file
// system.
func Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("shmring: %w", err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Supported reports whether rings can be made on this system.
const Supported = true
