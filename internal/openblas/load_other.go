//go:build !((linux || darwin) && (amd64 || arm64))

package openblas

import "errors"

func open() (*library, error) {
	return nil, errors.New("openblas: run-time loading not supported on this platform")
}
