package csp

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// What the node-wise and layer-wise samplers share besides the protocol
// helpers of proto.go.

// checkGroup checks a rank's patch against the partition offsets and the
// group (rank of size): it returns the partition's book, or why not.
func checkGroup(patch *layout.Patch, offsets []int64, rank, size int) (*book.Book, string) {
	if patch == nil || patch.Graph == nil {
		return nil, "nil patch"
	}
	b, err := book.New(offsets)
	if err != nil {
		return nil, fmt.Sprintf("offsets: %v", err)
	}
	if b.K() != size {
		return nil, fmt.Sprintf("%d parts in the offsets but the communicator has %d ranks", b.K(), size)
	}
	if size > maxRanks {
		return nil, fmt.Sprintf("%d ranks: at most %d", size, maxRanks)
	}
	if patch.Rank != rank {
		return nil, fmt.Sprintf("patch of rank %d given to rank %d", patch.Rank, rank)
	}
	lo, hi := b.Range(rank)
	if int64(patch.Lo) != lo || int64(patch.Hi) != hi || patch.Graph.NumRows != b.NumNodes() {
		return nil, fmt.Sprintf("patch [%d, %d) of %d nodes does not match the offsets' range [%d, %d) of %d", patch.Lo, patch.Hi, patch.Graph.NumRows, lo, hi, b.NumNodes())
	}
	return b, ""
}

// groupOf is a communicator's rank and size (rank 0 of 1 without one).
func groupOf(c comm.DeviceComm) (rank, size int) {
	if c == nil {
		return 0, 1
	}
	return c.Rank(), c.Size()
}

// newProto is rank's protocol over the partition b: exchanges through c
// (local copies on be when the group has one rank), counted into st,
// whose per-peer and per-hop counters it sizes.
func newProto(be backend.Backend, c comm.DeviceComm, b *book.Book, rank int, st *Stats, hops int) *proto {
	size := b.K()
	lo, hi := b.Range(rank)
	st.BytesSent, st.Frontier = make([]int64, size), make([]int64, hops)
	p := &proto{rank: rank, size: size, n: b.NumNodes(), off: b.Offsets(), rows: hi - lo, stats: st}
	if c != nil && size > 1 {
		p.x, p.remote = c, true
	} else {
		p.x = local{be}
	}
	return p
}

// gpuDevice is what the device machines need of a back end: kernels
// compiled at run time and its queue to launch them on, pinned memory
// (for reads, and mapped for the Mapped and Split placements) and
// matrices over the blocks they build (the CUDA back end).
type gpuDevice interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
	backend.SparseBuilder
}

// backendOf sorts a rank's back end: a device with the capabilities of
// gpuDevice (the device machines) or the CPU back end (the CPU machine);
// msg says why neither.
func backendOf(be backend.Backend) (dev gpuDevice, host *cpu.Backend, msg string) {
	switch d := be.(type) {
	case nil:
	case *cpu.Backend:
		if d != nil {
			return nil, d, ""
		}
	case gpuDevice:
		return d, nil, ""
	default:
		return nil, nil, fmt.Sprintf("back end %s (%T): want the CPU back end or a device with run-time kernels, a queue, pinned memory and sparse matrices over its buffers (backend.Kernels, Enqueuer, PinnedMemory, SparseBuilder)", be.Name(), be)
	}
	return nil, nil, "nil device"
}

// placer copies host arrays to a device, or into mapped pinned host
// memory read through UVA, and frees them: the layer-wise and walk
// machines' own copies of a patch's rows.
type placer struct {
	dev   gpuDevice
	owned []backend.Buffer
	hosts []backend.HostBuffer
}

// place copies data ([]int64, []int32 or []float64) and returns it as
// a kernel argument: its device buffer, or its device address when
// mapped (the address 0 for no elements).
func (p *placer) place(data any, mapped bool) (backend.Arg, error) {
	var n, size int
	var ptr unsafe.Pointer
	switch v := data.(type) {
	case []int64:
		n, size = len(v), 8
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	case []int32:
		n, size = len(v), 4
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	case []float64:
		n, size = len(v), 8
		if n > 0 {
			ptr = unsafe.Pointer(&v[0])
		}
	default:
		return backend.Arg{}, fmt.Errorf("csp: place %T", data)
	}
	if n == 0 {
		return backend.Arg{}, nil
	}
	if mapped {
		h, err := p.dev.AllocPinned(uint64(n*size), true)
		if err != nil {
			return backend.Arg{}, err
		}
		p.hosts = append(p.hosts, h)
		copy(h.Bytes(), unsafe.Slice((*byte)(ptr), n*size))
		return backend.Addr(h.DeviceAddr()), nil
	}
	var b backend.Buffer
	err := p.dev.Enqueue(func(l backend.Queue) error {
		var err error
		if size == 8 {
			if b, err = l.AllocRaw(backend.Int64, n); err == nil {
				err = l.UploadFrom(b, unsafe.Slice((*int64)(ptr), n))
			}
		} else if b, err = l.AllocRaw(backend.Int32, n); err == nil {
			err = l.UploadFrom(b, unsafe.Slice((*int32)(ptr), n))
		}
		return err
	})
	if b != nil {
		p.owned = append(p.owned, b)
	}
	if err != nil {
		return backend.Arg{}, err
	}
	return backend.Buf(b), nil
}

// free releases everything placed.
func (p *placer) free() error {
	for _, b := range p.owned {
		p.dev.Free(b)
	}
	p.owned = nil
	var first error
	for _, h := range p.hosts {
		if err := h.Free(); first == nil {
			first = err
		}
	}
	p.hosts = nil
	return first
}

// mappedEdges is whether a placement keeps per-edge arrays in host
// memory (Mapped, and Split: these copies are not split by row).
func mappedEdges(pl gpusample.Placement) bool {
	return pl == gpusample.Mapped || pl == gpusample.Split
}

// member is what every collective sampler of a rank holds: its back
// end, rank and group size, counters and the lock its calls take (one
// rank's membership of the sampling group).
type member struct {
	be         backend.Backend
	rank, size int

	mu     sync.Mutex
	stats  Stats
	closed bool
}

// Rank is this rank's index in the group.
func (m *member) Rank() int { return m.rank }

// Size is the number of ranks.
func (m *member) Size() int { return m.size }

// Stats returns a copy of the counters (for a Walker, Frontier[t] counts
// the walkers this rank held at step t).
func (m *member) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.BytesSent = slices.Clone(m.stats.BytesSent)
	st.Frontier = slices.Clone(m.stats.Frontier)
	return st
}
