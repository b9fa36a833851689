//go:build !(linux && (amd64 || arm64))

package gpushm

import (
	"errors"

	cu "github.com/strata-gnn/strata/internal/cuda"
)

func loadEventQuery() error {
	return errors.New("gpushm: CUDA needs linux/amd64 or linux/arm64")
}

func eventDone(cu.Event) (bool, error) { return false, loadEventQuery() }
