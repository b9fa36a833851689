//go:build unix

package testkit

import (
	"os"
	"syscall"
	"testing"
)

// Mkfifo creates a named pipe at path (replacing a file there), skipping
// the test on platforms without FIFOs.
func Mkfifo(t testing.TB, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatalf("mkfifo %s: %v", path, err)
	}
}

// releaseFIFO unblocks a reader stuck on the FIFO at path: opening it for
// writing completes the reader's open, and closing gives it end of file.
func releaseFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}
