package checkpoint

import (
	"fmt"
	"io"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// testHookBeforeRename, when set by tests, runs after the temporary file is
// written and synced and before it is renamed: returning an error simulates
// a crash at that point.
var testHookBeforeRename func(tmp string) error

// WriteFile writes f to path atomically (internal/atomicfile): a temporary
// file in the same directory is written, fsynced and renamed over path,
// then the directory is fsynced so the rename itself is durable. On error
// the temporary file is removed and path is untouched.
func WriteFile(path string, f *File) error {
	err := atomicfile.Write(path, func(w io.Writer) error { return Encode(w, f) },
		atomicfile.Options{BeforeRename: testHookBeforeRename})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
