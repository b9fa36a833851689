package csp

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
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

// opening is a constructor's start: c's group (rank of size), the
// partition's book, and host, the CPU back end (nil: a device of the
// registered Device).
type opening struct {
	op         string
	be         backend.Backend
	c          comm.Comm
	rank, size int
	b          *book.Book
	host       *cpu.Backend
}

// open runs the checks every constructor (op) starts with: the patch
// against the offsets and c's group, the constructor's own
// configuration (check) and the back end. They fail with an *Error of
// ErrInput.
func open(op string, be backend.Backend, patch *layout.Patch, offsets []int64, c comm.Comm, check func() error) (*opening, error) {
	o := &opening{op: op, be: be, c: c}
	o.rank, o.size = groupOf(c)
	var msg string
	o.b, msg = checkGroup(patch, offsets, o.rank, o.size)
	if msg == "" {
		if err := check(); err != nil {
			msg = err.Error()
		}
	}
	if msg == "" {
		o.host, msg = backendOf(be)
	}
	if msg != "" {
		return nil, &Error{Rank: o.rank, Op: op, Hop: -1, Msg: msg, Err: ErrInput}
	}
	return o, nil
}

// proto makes m this rank's membership and returns its protocol over
// hops hops, counting into m's stats.
func (o *opening) proto(m *member, hops int) *proto {
	m.be, m.rank, m.size = o.be, o.rank, o.size
	return newProto(o.be, o.c, o.b, o.rank, &m.stats, hops)
}

// fail is the constructor's error for err, a failure after its checks
// (building the machine or its buffers): an *Error as it is, a bad
// graph or sampler configuration as ErrInput.
func (o *opening) fail(err error) error {
	var ge *Error
	if errors.As(err, &ge) {
		return err
	}
	if errors.Is(err, sample.ErrConfig) || errors.Is(err, sample.ErrGraph) {
		err = fmt.Errorf("%w: %w", ErrInput, err)
	}
	return &Error{Rank: o.rank, Op: o.op, Hop: -1, Err: err}
}

// groupOf is a communicator's rank and size (rank 0 of 1 without one).
func groupOf(c comm.Comm) (rank, size int) {
	if c == nil {
		return 0, 1
	}
	return c.Rank(), c.Size()
}

// newProto is rank's protocol over the partition b: exchanges through c
// (local copies on be when the group has one rank), counted into st,
// whose per-peer and per-hop counters it sizes.
func newProto(be backend.Backend, c comm.Comm, b *book.Book, rank int, st *Stats, hops int) *proto {
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

// backendOf sorts a rank's back end: the CPU back end (host, the CPU
// machines) or a device the registered Device accepts (nil, ""); msg
// says why neither.
func backendOf(be backend.Backend) (host *cpu.Backend, msg string) {
	switch d := be.(type) {
	case nil:
	case *cpu.Backend:
		if d != nil {
			return d, ""
		}
	default:
		if device != nil && device.Accepts(be) {
			return nil, ""
		}
		linked := ""
		if device == nil {
			linked = "; no device machines are linked in (package internal/cudadsp registers the CUDA ones)"
		}
		return nil, fmt.Sprintf("back end %s (%T): want the CPU back end or a device with run-time kernels, a queue, pinned memory and sparse matrices over its buffers (backend.Kernels, Enqueuer, PinnedMemory, SparseBuilder)%s", be.Name(), be, linked)
	}
	return nil, "nil device"
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
