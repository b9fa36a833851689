//go:build !linux

package gpushm

import (
	"context"
	"errors"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend"
)

// ErrUnsupported: the GPU shared-memory back end needs Linux.
var ErrUnsupported = errors.New("gpushm: the GPU shared-memory back end needs Linux")

func Open(ctx context.Context, store rendezvous.Store, be backend.Backend, o Options) (comm.Comm, error) {
	return nil, ErrUnsupported
}

func NewLocal(bes []backend.Backend, o Options) ([]comm.Comm, error) {
	return nil, ErrUnsupported
}
