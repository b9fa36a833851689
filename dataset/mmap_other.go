//go:build !unix

package dataset

import (
	"errors"
	"os"
)

const canMmap = false

func mmapFile(*os.File, int64) ([]byte, error) { return nil, errors.New("mmap not supported") }

func munmap([]byte) error { return nil }
