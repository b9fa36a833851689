//go:build linux && (amd64 || arm64)

package cudacomm

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/cudalib"
)

// cuEventQuery is not among internal/cuda's bindings (it only has the
// blocking cuEventSynchronize); it is resolved here from the same libcuda
// handle, which internal/cudalib already opened.
var (
	queryOnce sync.Once
	queryFn   uintptr
	queryErr  error
)

// Load resolves cuEventQuery once (libcuda must be loadable): call it
// before polling events (Event.Done).
func Load() error {
	queryOnce.Do(func() {
		f, err := cudalib.Open(cudalib.Driver)
		if err != nil {
			queryErr = err
			return
		}
		if queryFn, err = cudalib.Sym(f.Handle, "cuEventQuery"); err != nil || queryFn == 0 {
			queryErr = fmt.Errorf("cuda: %s lacks cuEventQuery", f.Path)
		}
	})
	return queryErr
}

// eventDone reports whether the work before e's record has completed
// (Load first).
func eventDone(e cu.Event) (bool, error) {
	r, _, _ := purego.SyscallN(queryFn, uintptr(e))
	switch code := cu.Result(int32(uint32(r))); code {
	case cu.Success:
		return true, nil
	case cu.ErrNotReady:
		return false, nil
	default:
		return false, fmt.Errorf("cuda: cuEventQuery: CUresult %d (a copy to or from the GPU failed)", int(code))
	}
}
