//go:build !((linux || darwin) && (amd64 || arm64))

package metis

import "fmt"

func open() (*library, error) {
	return nil, fmt.Errorf("%w: run-time loading is not supported on this platform", ErrUnavailable)
}
