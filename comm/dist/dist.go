// Package dist opens a communicator for this process from the environment
// that 'strata launch' or torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT): it joins the rank-0 store, finds out whether all ranks
// share a host, resolves --comm (auto, inproc, shm, tcp, nccl) with
// comm.Select and opens that back end.
package dist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/shm"
	"github.com/strata-gnn/strata/comm/tcp"
)

// Options configure Init.
type Options struct {
	// Backend is --comm: auto (default), inproc, shm, tcp or nccl.
	Backend string
	// Comm configures every operation (timeout, debug checks).
	Comm comm.Options
	// SetupTimeout bounds joining the store and opening the back end
	// (rendezvous.DefaultTimeout if zero and ctx has no deadline).
	SetupTimeout time.Duration
	// Security for the store and TCP; nil reads the environment
	// (auth.FromEnv: STRATA_COMM_TLS_*, STRATA_COMM_SECRET,
	// STRATA_COMM_INSECURE_TRUSTED_NETWORK). Off loopback mutual TLS is
	// required (see comm/auth).
	Security *auth.Security
	// Host is the address TCP advertises (STRATA_COMM_HOST, else the
	// local address that reaches MASTER_ADDR).
	Host string
	// GPU describes the ranks' GPUs for auto; nil means CPU ranks.
	GPU func() (peerAccess, nccl bool)
	// ShmSlotBytes and TCPSegmentBytes tune the back ends (0: default).
	ShmSlotBytes    int
	ShmHeapBytes    int // per rank, for Comm.Alloc (DefaultShmHeap if 0, none if < 0)
	ShmReducer      string
	TCPSegmentBytes int
}

// DefaultShmHeap is each rank's share of the shm segment for Comm.Alloc
// (gradient buckets and other collective buffers).
const DefaultShmHeap = 64 << 20

// Info says what Init chose.
type Info struct {
	Env      rendezvous.Env
	Kind     string // back end opened
	Reason   string // why (from comm.Select)
	SameHost bool
}

// Init opens this rank's communicator. Closing it also leaves the store
// (on rank 0: stops serving it).
func Init(ctx context.Context, o Options) (comm.Comm, Info, error) {
	env, err := rendezvous.FromEnv()
	if err != nil {
		return nil, Info{}, err
	}
	return InitEnv(ctx, env, o)
}

// InitEnv is Init with an explicit environment.
func InitEnv(ctx context.Context, env rendezvous.Env, o Options) (comm.Comm, Info, error) {
	info := Info{Env: env}
	if _, ok := ctx.Deadline(); !ok {
		to := o.SetupTimeout
		if to <= 0 {
			to = rendezvous.DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, to)
		defer cancel()
	}
	store, sec, err := rendezvous.JoinEnv(ctx, env, o.Security)
	if err != nil {
		return nil, info, err
	}
	c, err := open(ctx, store, env, o, sec, &info)
	if err == nil {
		// Rank 0 serves the store: nobody may still need it when it closes.
		err = store.Barrier(ctx, "dist/ready")
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		store.Close()
		return nil, info, fmt.Errorf("dist rank %d: %w", env.Rank, err)
	}
	return &withStore{Comm: c, store: store}, info, nil
}

func open(ctx context.Context, store rendezvous.Store, env rendezvous.Env, o Options, sec auth.Security, info *Info) (comm.Comm, error) {
	same, err := rendezvous.SameHost(ctx, store, "dist")
	if err != nil {
		return nil, err
	}
	info.SameHost = same
	top := comm.Topology{SameHost: same, Virtual: env.WorldSize == 1}
	if o.GPU != nil {
		top.GPUs = true
		top.PeerAccess, top.NCCL = o.GPU()
	}
	kind, why, err := comm.Select(o.Backend, top)
	if err != nil {
		return nil, err
	}
	info.Kind, info.Reason = kind, why
	switch kind {
	case comm.KindInproc:
		cs, err := inproc.New(1, o.Comm)
		if err != nil {
			return nil, err
		}
		return cs[0], nil
	case comm.KindShm:
		return shm.New(ctx, store, shm.Options{Options: o.Comm, SlotBytes: o.ShmSlotBytes, HeapBytes: heapBytes(o.ShmHeapBytes), Reducer: o.ShmReducer})
	case comm.KindTCP:
		host := rendezvous.AdvertiseHost(o.Host, env)
		return tcp.New(ctx, store, tcp.Options{Options: o.Comm, Security: sec, Host: host, SegmentBytes: o.TCPSegmentBytes})
	case comm.KindNCCL:
		return nil, errors.New("the NCCL back end is not built yet")
	}
	return nil, fmt.Errorf("unknown back end %q", kind)
}

func heapBytes(b int) int {
	switch {
	case b == 0:
		return DefaultShmHeap
	case b < 0:
		return 0
	}
	return b
}

type withStore struct {
	comm.Comm
	store rendezvous.Store
}

func (w *withStore) Close() error {
	err := w.Comm.Close()
	w.store.Close()
	return err
}
