//go:build !unix

package regfile

import (
	"io/fs"
	"os"
)

const openFlags = 0

// precheck refuses a non-regular file before opening it, on platforms
// without O_NONBLOCK (a racing replacement is still caught by the check
// after the open, though that open may block).
func precheck(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "open", Path: path, Err: &NotRegularError{Mode: fi.Mode()}}
	}
	return nil
}
