//go:build !(linux && (amd64 || arm64))

package cudacomm

import (
	"errors"

	cu "github.com/strata-gnn/strata/internal/cuda"
)

// Load fails on this platform.
func Load() error {
	return errors.New("cuda: CUDA needs linux/amd64 or linux/arm64")
}

// eventDone fails on this platform.
func eventDone(cu.Event) (bool, error) { return false, Load() }
