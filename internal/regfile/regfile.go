// Package regfile opens files that must be regular files (dataset
// manifests and arrays, importer inputs, checkpoints, partition files,
// configs) without ever blocking: a FIFO in place of such a file would
// otherwise block open(2) until a writer appears, forever.
//
// Open opens with O_NONBLOCK where the platform has it (so opening a FIFO
// returns at once), then checks the opened file's type with fstat, so
// there is no window between the check and the open. Anything but a
// regular file (FIFO, socket, device, directory) is refused with an
// *fs.PathError whose Err is a *NotRegularError (errors.Is
// ErrNotRegular).
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is matched (errors.Is) by every refusal of a file that is
// not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError says what kind of file was found instead.
type NotRegularError struct {
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("not a regular file (%s)", Kind(e.Mode))
}

// Is makes errors.Is(err, ErrNotRegular) hold.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// Kind names the type of a file mode in words.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "irregular file"
}

// Open opens path for reading, refusing anything but a regular file (see
// the package doc). Symbolic links are followed. The returned file's Stat
// is the one that was checked.
func Open(path string) (*os.File, fs.FileInfo, error) {
	if err := precheck(path); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: &NotRegularError{Mode: fi.Mode()}}
	}
	return f, fi, nil
}

// TooLargeError reports a file larger than the limit its reader accepts.
type TooLargeError struct {
	Path  string
	Size  int64 // bytes seen (at least Limit+1)
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than %d bytes", e.Path, e.Limit)
}

// ReadFile reads the regular file at path, refusing one larger than limit
// bytes (a *TooLargeError) before reading more than limit+1 bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, _, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Path: path, Size: int64(len(b)), Limit: limit}
	}
	return b, nil
}
