package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TargetError reports a path that Write cannot create or replace.
type TargetError struct {
	Path string // the file to write
	Msg  string // what is wrong, naming the path or its directory
	Err  error  // the underlying error, if any
}

func (e *TargetError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *TargetError) Unwrap() error { return e.Err }

// Check reports, before anything is written, whether Write can create or
// replace path: its directory exists and takes a new file (Check creates
// and removes an empty one there), and path is not a directory or a
// special file such as a device, which the final rename would replace.
// A nil error is no promise: the disk can still fill up before the
// write. Problems are *TargetError.
func Check(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &TargetError{Path: path, Msg: fmt.Sprintf("directory %s does not exist", dir)}
	case err != nil:
		return &TargetError{Path: path, Msg: fmt.Sprintf("cannot reach directory %s", dir), Err: unwrapPath(err)}
	case !fi.IsDir():
		return &TargetError{Path: path, Msg: fmt.Sprintf("%s is not a directory", dir)}
	}
	if err := checkTarget(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check-*")
	if err != nil {
		return &TargetError{Path: path, Msg: fmt.Sprintf("cannot create a file in %s", dir), Err: unwrapPath(err)}
	}
	name := f.Name()
	cerr := f.Close()
	if err := os.Remove(name); err != nil {
		return &TargetError{Path: path, Msg: fmt.Sprintf("cannot remove the test file %s", name), Err: unwrapPath(err)}
	}
	if cerr != nil {
		return &TargetError{Path: path, Msg: fmt.Sprintf("cannot write a file in %s", dir), Err: unwrapPath(cerr)}
	}
	return nil
}

// checkTarget refuses a path that exists and is neither a regular file
// nor a symbolic link (which the rename replaces, leaving its target
// alone).
func checkTarget(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &TargetError{Path: path, Msg: fmt.Sprintf("cannot inspect %s", path), Err: unwrapPath(err)}
	}
	m := fi.Mode()
	if m.IsRegular() || m&fs.ModeSymlink != 0 {
		return nil
	}
	kind := "a special file"
	switch {
	case m.IsDir():
		return &TargetError{Path: path, Msg: fmt.Sprintf("%s is a directory, not a file", path)}
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a device"
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	}
	return &TargetError{Path: path, Msg: fmt.Sprintf("%s is %s, not a regular file", path, kind)}
}

// unwrapPath drops a *fs.PathError's operation and path (the message
// names the path already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
