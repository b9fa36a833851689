package checkpoint

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// testHookBeforeRename, when set by tests, runs after the temporary file is
// written and synced and before it is renamed: returning an error simulates
// a crash at that point.
var testHookBeforeRename func(tmp string) error

// WriteFile writes f to path atomically: a temporary file in the same
// directory is written, fsynced and renamed over path, then the directory
// is fsynced so the rename itself is durable. On error the temporary file
// is removed and path is untouched.
func WriteFile(path string, f *File) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = Encode(bw, f); err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", tmpName, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", tmpName, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync %s: %w", tmpName, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("checkpoint: closing %s: %w", tmpName, err)
	}
	if testHookBeforeRename != nil {
		if err = testHookBeforeRename(tmpName); err != nil {
			return err
		}
	}
	if err = os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync directory %s: %w", dir, err)
	}
	return nil
}
