package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/shm"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/comm/tcp"
	"github.com/strata-gnn/strata/internal/cudacomm"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// shmSlotBytes is the slot size of the world's shared-memory groups: a
// job opens several groups (one per pipeline stage), and small slots
// keep their segments small where /dev/shm is (containers).
const shmSlotBytes = 256 << 10

// hostKind is the host communicators' back end: inproc in one process,
// else comm.Select's choice for the job's hosts (shm on one, tcp across).
func (w *World) hostKind() string {
	if !w.Multi() {
		return comm.KindInproc
	}
	kind, _, err := comm.Select(comm.KindAuto, comm.Topology{SameHost: w.same})
	if err != nil {
		return comm.KindTCP
	}
	return kind
}

// claim reserves a group name (every process must open the same groups
// in the same order, each name once).
func (w *World) claim(name string) error {
	if name == "" || len(name) > 64 || strings.ContainsAny(name, "/ ") {
		return fmt.Errorf("world: group name %q: want 1..64 characters without '/' or spaces", name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("world: left the job")
	}
	if w.groups[name] {
		return fmt.Errorf("world: group %q opened twice", name)
	}
	w.groups[name] = true
	return nil
}

// HostKind is the kind of the job's host communicators: inproc in one
// process, else comm.Select's choice for the job's hosts (shm on one,
// tcp across).
func (w *World) HostKind() string { return w.hostKind() }

// HostGroup opens a communicator on host memory for every local rank,
// ranked globally over the job (Rank() is the global rank, Size() the
// job's): every process must call it with the same name, in the same
// order. One process: comm/inproc. Across processes: shm or tcp (see
// the package doc), float sums in rank order. Its buffers are the CPU
// back end's (cpu.WrapF32 and the like).
func (w *World) HostGroup(ctx context.Context, name string, o comm.Options) ([]comm.Comm, error) {
	return w.hostGroup(ctx, name, "", o)
}

// hostGroup is HostGroup of a given kind across processes (shm or tcp;
// "" or auto: hostKind).
func (w *World) hostGroup(ctx context.Context, name, kind string, o comm.Options) ([]comm.Comm, error) {
	if err := w.claim(name); err != nil {
		return nil, err
	}
	if !w.Multi() {
		return inproc.New(w.size, o)
	}
	if kind == "" || kind == comm.KindAuto {
		kind = w.hostKind()
	}
	switch kind {
	case comm.KindShm:
		if !w.same {
			return nil, fmt.Errorf("world: group %q: shm needs every process on one host", name)
		}
	case comm.KindTCP:
	default:
		return nil, fmt.Errorf("world: group %q: %s cannot span processes (want shm or tcp)", name, kind)
	}
	ctx, cancel := w.bound(ctx)
	defer cancel()
	cs, err := w.each(ctx, name, func(ctx context.Context, v rendezvous.Store, _ int) (closer, error) {
		switch kind {
		case comm.KindShm:
			return shm.New(ctx, v, shm.Options{Options: o, SlotBytes: shmSlotBytes})
		default:
			c, err := tcp.New(ctx, v, tcp.Options{Options: o, Security: w.sec, Host: w.procs[w.me].Addr})
			if err != nil {
				return nil, err
			}
			return rankOrder{c}, nil
		}
	})
	if err != nil {
		return nil, fmt.Errorf("world: %s group %q: %w", kind, name, err)
	}
	out := make([]comm.Comm, len(cs))
	for i, c := range cs {
		out[i] = c.(comm.Comm)
	}
	return out, nil
}

// DeviceOptions configure DeviceGroup.
type DeviceOptions struct {
	comm.Options
	// Kind is the communicators' back end: "" or auto (NCCL when every
	// device is a CUDA GPU, else the job's host kind), nccl, or a host
	// kind (shm, tcp; in one process inproc stands for them).
	Kind string
	// Async: NCCL operations return once queued (nccl.Options.Async).
	Async bool
	// Prefix names the NCCL group in this process (nccl.Options.Prefix).
	Prefix string
}

// DeviceGroup opens a communicator on device buffers for every local
// rank, devs[i] being local rank i's device (the handle whose stream its
// collectives use): NCCL, or a HostGroup of the same name whose buffers
// are the CPU devices' own and through which GPU buffers are staged
// (comm/staged). It returns the communicators and their kind.
func (w *World) DeviceGroup(ctx context.Context, name string, devs []backend.Backend, o DeviceOptions) ([]comm.Comm, string, error) {
	if len(devs) != w.Local() {
		return nil, "", fmt.Errorf("world: group %q: %d devices for %d local ranks", name, len(devs), w.Local())
	}
	gpus := true
	for _, d := range devs {
		gpus = gpus && d != nil && cudacomm.IsGPU(d)
	}
	kind := o.Kind
	if kind == "" || kind == comm.KindAuto {
		kind = comm.KindNCCL
		if !gpus {
			kind = w.hostKind()
		}
	}
	if kind != comm.KindNCCL {
		if kind == comm.KindInproc {
			kind = ""
		}
		hs, err := w.hostGroup(ctx, name, kind, o.Options)
		if err != nil {
			return nil, "", err
		}
		if !gpus {
			return hs, hs[0].Kind(), nil // CPU buffers are host memory
		}
		out := make([]comm.Comm, len(hs))
		for i, h := range hs {
			out[i] = staged.Open(h, devs[i], o.Options)
		}
		return out, "staged-" + hs[0].Kind(), nil
	}
	if !gpus {
		return nil, "", fmt.Errorf("world: group %q: nccl needs CUDA devices", name)
	}
	if err := w.claim(name); err != nil {
		return nil, "", err
	}
	no := nccl.Options{Options: o.Options, Prefix: o.Prefix, Async: o.Async}
	if !w.Multi() {
		cs, err := nccl.OpenLocal(ctx, devs, no)
		return cs, comm.KindNCCL, err
	}
	if w.real && os.Getenv("NCCL_SOCKET_IFNAME") == "" {
		// One physical host (machines simulated with NCCL_HOSTID):
		// bootstrap over loopback; other interfaces may be down in
		// containers.
		os.Setenv("NCCL_SOCKET_IFNAME", "lo")
	}
	ctx, cancel := w.bound(ctx)
	defer cancel()
	// ncclCommInitRank of this process's GPUs must run concurrently:
	// each blocks until every rank of the group has joined.
	cs, err := w.each(ctx, name, func(ctx context.Context, v rendezvous.Store, i int) (closer, error) {
		return nccl.Open(ctx, v, devs[i], no)
	})
	if err != nil {
		return nil, "", fmt.Errorf("world: NCCL group %q: %w", name, err)
	}
	out := make([]comm.Comm, len(cs))
	for i, c := range cs {
		out[i] = c.(comm.Comm)
	}
	return out, comm.KindNCCL, nil
}

type closer interface{ Close() error }

// each opens one endpoint per local rank concurrently (they wait for
// each other), each through a view of the store; on failure it closes
// those that opened.
func (w *World) each(ctx context.Context, name string, open func(context.Context, rendezvous.Store, int) (closer, error)) ([]closer, error) {
	n := w.Local()
	out := make([]closer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := &view{w: w, rank: w.Rank(i), prefix: "g/" + name + "/"}
			out[i], errs[i] = open(ctx, v, i)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("rank %d: %w", w.Rank(i), errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
		if ae := w.aborted(ctx); ae != nil {
			return nil, ae
		}
		return nil, err
	}
	return out, nil
}

// view is the job's store as one rank sees it: its global rank, the
// job's size, keys under the group's prefix. Gets end when a process
// gives up (World.get).
type view struct {
	w      *World
	rank   int
	prefix string
	bar    map[string]int
	mu     sync.Mutex
}

func (v *view) Rank() int { return v.rank }
func (v *view) Size() int { return v.w.size }

func (v *view) Set(ctx context.Context, key string, value []byte) error {
	return v.w.store.Set(ctx, v.prefix+key, value)
}

func (v *view) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := v.w.get(ctx, v.prefix+key)
	if err != nil {
		// Keys ending in a rank ("addr/3") are that rank's to set: say
		// which process it belongs to.
		if i := strings.LastIndexByte(key, '/'); i >= 0 {
			if r, perr := strconv.Atoi(key[i+1:]); perr == nil && r >= 0 && r < v.w.size {
				var ae *AbortError
				if !errors.As(err, &ae) {
					return nil, &PeerError{Processes: []Process{v.w.Owner(r)}, Ranks: []int{r}, Err: err}
				}
			}
		}
	}
	return b, err
}

func (v *view) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return v.w.store.Add(ctx, v.prefix+key, delta)
}

// Barrier counts arrivals under the name's n-th use and waits for the
// last to mark it done (the back ends do not use it; it is here to be a
// whole Store).
func (v *view) Barrier(ctx context.Context, name string) error {
	v.mu.Lock()
	if v.bar == nil {
		v.bar = map[string]int{}
	}
	v.bar[name]++
	key := fmt.Sprintf("%sbarrier/%s/%d", v.prefix, name, v.bar[name])
	v.mu.Unlock()
	n, err := v.w.store.Add(ctx, key, 1)
	if err != nil {
		return err
	}
	if n == int64(v.w.size) {
		return v.w.store.Set(ctx, key+"/done", []byte{1})
	}
	_, err = v.w.get(ctx, key+"/done")
	return err
}

func (v *view) Close() error { return nil }

// rankOrder makes a host communicator's float all-reduce sum in rank
// order (all-gather, then 0, 1, ..., n-1, as comm/inproc and comm/shm
// do), so that the job's numbers do not depend on the transport.
type rankOrder struct{ comm.Comm }

func (c rankOrder) Caps() comm.Caps {
	caps := c.Comm.Caps()
	caps.RankOrderSum = true
	return caps
}

func (c rankOrder) AllReduce(ctx context.Context, buf backend.Buffer, op comm.ReduceOp) error {
	if buf == nil || buf.DType() != backend.Float32 || (op != comm.Sum && op != comm.Mean) || c.Size() == 1 {
		return c.Comm.AllReduce(ctx, buf, op)
	}
	out := cpu.F32(buf)
	if out == nil {
		return c.Comm.AllReduce(ctx, buf, op) // not a CPU buffer: the back end says so
	}
	n, m := c.Size(), buf.Len()
	all := make([]float32, n*m)
	if err := c.Comm.AllGather(ctx, cpu.WrapF32(all), buf); err != nil {
		return err
	}
	copy(out, all[:m])
	for r := 1; r < n; r++ {
		for i, x := range all[r*m : (r+1)*m] {
			out[i] += x
		}
	}
	if op == comm.Mean {
		for i := range out {
			out[i] /= float32(n)
		}
	}
	return nil
}
