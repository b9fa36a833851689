// Package devdist opens a communicator of device buffers (comm.Comm) for this
// process from the torchrun-style environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), the way comm/dist opens a host one: it joins
// the rank-0 store, finds out whether all ranks share a host, probes the
// GPUs (peer-to-peer access between every pair, NCCL loadable on every
// rank), resolves --comm with comm.SelectDevice and opens NCCL
// (comm/nccl), GPU shared memory (comm/gpushm), or device buffers staged
// through TCP (comm/staged over comm/tcp).
package devdist

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/comm/tcp"
	"github.com/strata-gnn/strata/internal/cudacomm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Options configure Init.
type Options struct {
	// Backend is --comm: auto (default), nccl, gpushm (or shm), tcp.
	Backend string
	// Comm configures every operation (timeout, debug checks).
	Comm comm.Options
	// SetupTimeout bounds joining the store and opening the back end
	// (rendezvous.DefaultTimeout if zero and ctx has no deadline).
	SetupTimeout time.Duration
	// Security for the store and TCP; nil reads the environment
	// (auth.FromEnv). Off loopback mutual TLS is required (see comm/auth).
	Security *auth.Security
	// Host is the address TCP advertises (STRATA_COMM_HOST, else the
	// local address that reaches MASTER_ADDR).
	Host string
	// GPUShm tunes the GPU shared-memory back end (its Options field is
	// replaced by Comm).
	GPUShm gpushm.Options
	// NCCL configures NCCL (its Options field is replaced by Comm): Async.
	NCCL nccl.Options
}

// Info says what Init found and chose.
type Info struct {
	Env        rendezvous.Env
	Kind       string // back end opened
	Reason     string // why (from comm.SelectDevice)
	Topology   comm.Topology
	NCCLError  string // why NCCL is not available, on this rank
	PeerDetail string // how peer access was decided
}

// Init opens this rank's device communicator on be (normally the CUDA
// device of LOCAL_RANK). Closing it also leaves the store.
func Init(ctx context.Context, be backend.Backend, o Options) (comm.Comm, Info, error) {
	env, err := rendezvous.FromEnv()
	if err != nil {
		return nil, Info{}, err
	}
	return InitEnv(ctx, env, be, o)
}

// InitEnv is Init with an explicit environment.
func InitEnv(ctx context.Context, env rendezvous.Env, be backend.Backend, o Options) (comm.Comm, Info, error) {
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
	c, err := open(ctx, store, env, be, o, sec, &info)
	if err == nil {
		if err = store.Barrier(ctx, "devdist/ready"); err != nil {
			c.Close()
		}
	}
	if err != nil {
		store.Close()
		return nil, info, fmt.Errorf("devdist rank %d: %w", env.Rank, err)
	}
	return &withStore{Comm: c, store: store}, info, nil
}

// Probe publishes this rank's view of the GPUs and NCCL through the store
// and returns the job's topology (the same on every rank).
func Probe(ctx context.Context, store rendezvous.Store, be backend.Backend, info *Info) (comm.Topology, error) {
	var top comm.Topology
	same, err := rendezvous.SameHost(ctx, store, "devdist")
	if err != nil {
		return top, err
	}
	top.SameHost, top.Virtual = same, false
	isGPU := cudacomm.IsGPU(be)
	top.GPUs = allTrue(ctx, store, "devdist/gpu", isGPU)
	ncclErr := nccl.Available()
	if ncclErr != nil {
		info.NCCLError = ncclErr.Error()
	}
	top.NCCL = allTrue(ctx, store, "devdist/nccl", isGPU && ncclErr == nil)
	// Peer access: every rank checks its GPU against every other rank's,
	// found by PCI bus id among the GPUs this process can see.
	peer, detail := false, "ranks are on several hosts"
	if !isGPU {
		detail = "the ranks have no GPUs"
	}
	if isGPU && same {
		peer, detail = peerAccess(ctx, store, be)
	}
	if v := os.Getenv("NCCL_P2P_DISABLE"); v != "" && v != "0" {
		peer, detail = false, "NCCL_P2P_DISABLE="+v
	}
	top.PeerAccess = allTrue(ctx, store, "devdist/peer", peer)
	info.PeerDetail = detail
	info.Topology = top
	// Every rank has read what it needs before any goes on: a rank that
	// then fails (no GPUs for --comm nccl) closes the store, which would
	// cut off a slower rank still reading it, whose error ("rank 0 never
	// said which host it is on") would then hide the real one.
	if err := store.Barrier(ctx, "devdist/probed"); err != nil {
		return top, err
	}
	return top, nil
}

func open(ctx context.Context, store rendezvous.Store, env rendezvous.Env, be backend.Backend, o Options, sec auth.Security, info *Info) (comm.Comm, error) {
	top, err := Probe(ctx, store, be, info)
	if err != nil {
		return nil, err
	}
	kind, why, err := comm.SelectDevice(o.Backend, top)
	if err != nil {
		return nil, err
	}
	info.Kind, info.Reason = kind, why
	switch kind {
	case comm.KindNCCL:
		if !cudacomm.IsGPU(be) {
			return nil, fmt.Errorf("--comm nccl needs a CUDA device, have %s", be.Name())
		}
		if top.SameHost && os.Getenv("NCCL_SOCKET_IFNAME") == "" {
			// One host: bootstrap over loopback (other interfaces may be
			// down in containers).
			os.Setenv("NCCL_SOCKET_IFNAME", "lo")
		}
		no := o.NCCL
		no.Options = o.Comm
		return nccl.Open(ctx, store, be, no)
	case comm.KindGPUShm:
		g := o.GPUShm
		g.Options = o.Comm
		return gpushm.Open(ctx, store, be, g)
	case comm.KindTCP:
		host := rendezvous.AdvertiseHost(o.Host, env)
		h, err := tcp.New(ctx, store, tcp.Options{Options: comm.Options{Timeout: o.Comm.Timeout}, Security: sec, Host: host})
		if err != nil {
			return nil, err
		}
		return staged.Open(h, be, o.Comm), nil
	}
	return nil, fmt.Errorf("unknown back end %q", kind)
}

// allTrue publishes v for this rank and reports whether every rank
// published true (false if some rank never did).
func allTrue(ctx context.Context, store rendezvous.Store, key string, v bool) bool {
	s := "0"
	if v {
		s = "1"
	}
	if store.Set(ctx, key+"/"+strconv.Itoa(store.Rank()), []byte(s)) != nil {
		return false
	}
	for r := 0; r < store.Size(); r++ {
		b, err := store.Get(ctx, key+"/"+strconv.Itoa(r))
		if err != nil || string(b) != "1" {
			return false
		}
	}
	return true
}

// peerAccess reports whether be's GPU can access every other rank's GPU.
func peerAccess(ctx context.Context, store rendezvous.Store, be backend.Backend) (bool, string) {
	bus, err := cudacomm.BusID(be)
	if err != nil {
		return false, err.Error()
	}
	if store.Set(ctx, "devdist/bus/"+strconv.Itoa(store.Rank()), []byte(bus)) != nil {
		return false, "store"
	}
	for r := 0; r < store.Size(); r++ {
		if r == store.Rank() {
			continue
		}
		b, err := store.Get(ctx, "devdist/bus/"+strconv.Itoa(r))
		if err != nil {
			return false, fmt.Sprintf("rank %d did not publish its GPU", r)
		}
		peer := string(b)
		if strings.EqualFold(peer, bus) {
			return false, fmt.Sprintf("rank %d uses the same GPU (%s)", r, bus)
		}
		visible, can := cudacomm.CanAccess(be, peer)
		if !visible {
			return false, fmt.Sprintf("rank %d's GPU %s is not visible to this process", r, peer)
		}
		if !can {
			return false, fmt.Sprintf("%s cannot access %s (rank %d) directly", bus, peer, r)
		}
	}
	return true, "every GPU pair has peer-to-peer access"
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
