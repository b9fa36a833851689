//go:build !linux

package shm

import (
	"context"
	"errors"
	"os"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// ErrUnsupported: the shared-memory back end needs Linux (futex, memfd).
var ErrUnsupported = errors.New("shm: the shared-memory back end needs Linux")

// Options configure a shared-memory communicator.
type Options struct {
	comm.Options
	SlotBytes int
	Slots     int
	HeapBytes int
	Reducer   string
	Dir       string
	Prefix    string
}

func CreateFile(n int, o Options) (*os.File, error) { return nil, ErrUnsupported }

func Attach(ctx context.Context, f *os.File, rank, n int, o Options) (comm.Comm, error) {
	return nil, ErrUnsupported
}

func NewLocal(n int, o Options) ([]comm.Comm, error) { return nil, ErrUnsupported }

func New(ctx context.Context, store rendezvous.Store, o Options) (comm.Comm, error) {
	return nil, ErrUnsupported
}
