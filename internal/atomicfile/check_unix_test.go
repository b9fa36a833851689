//go:build unix

package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSpecialFileRefused: a named pipe (as a device such as /dev/full
// would be) is refused by Check and by Write, and stays what it was:
// Write's rename would have replaced it with a regular file.
func TestSpecialFileRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	want := fifo + " is a named pipe, not a regular file"
	var te *TargetError
	if err := Check(fifo); !errors.As(err, &te) || err.Error() != want {
		t.Fatalf("Check: %v, want %q", err, want)
	}
	err := Write(fifo, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err }, Options{})
	if !errors.As(err, &te) || err.Error() != want {
		t.Fatalf("Write: %v, want %q", err, want)
	}
	fi, err := os.Lstat(fifo)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe was replaced: %v, %v", fi.Mode(), err)
	}
	assertOnly(t, dir, "pipe")
}
