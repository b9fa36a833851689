// Package atomicfile replaces files atomically: the content goes to a
// temporary file in the same directory, which is fsynced, renamed over the
// target, and the directory is fsynced so the rename itself is durable. A
// reader therefore sees the old file or the new one, never a torn one, and
// a failure leaves the target untouched and no temporary file behind.
// Checkpoints, partitions, reports and plots are written this way.
package atomicfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Options tune Write.
type Options struct {
	// NoSync skips both fsyncs (tests and scratch data): the replacement is
	// still atomic, but not durable across a power loss.
	NoSync bool
	// Perm is the mode of the new file (default 0644; CreateTemp's 0600 is
	// not what users expect of a report).
	Perm os.FileMode
	// BeforeRename, when set, runs after the temporary file is complete and
	// before the rename; an error aborts the write (tests use it to
	// simulate a crash at that point).
	BeforeRename func(tmp string) error
}

// WriteFile writes data to path atomically with default options.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, Options{})
}

// WriteJSON writes v to path as indented JSON with a final newline,
// atomically with default options (the reports of every trainer).
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'))
}

// Write streams the new content of path through write (buffered) and
// replaces path atomically. Errors name the file involved. A path that
// is a directory or a special file (a device such as /dev/full, a pipe)
// is refused before anything is written: the rename would replace it.
func Write(path string, write func(io.Writer) error, opts Options) (err error) {
	if err := checkTarget(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(name)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = write(bw); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if !opts.NoSync {
		if err = tmp.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", name, err)
		}
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", name, err)
	}
	perm := opts.Perm
	if perm == 0 {
		perm = 0o644
	}
	if err = os.Chmod(name, perm); err != nil {
		return err
	}
	if opts.BeforeRename != nil {
		if err = opts.BeforeRename(name); err != nil {
			return err
		}
	}
	if err = os.Rename(name, path); err != nil {
		return err
	}
	if opts.NoSync {
		return nil
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so renames and creations inside it are
// durable (directory-level atomic writes need it after their rename).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
