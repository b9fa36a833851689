package csp

import (
	"context"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Machine is what the protocol (proto) needs from one rank's device:
// buffers and the protocol's kernels. Every method but Read queues work
// in order and returns without waiting for it; Read waits (it is the
// host's only way to learn a device-side size). Sizes passed in are
// exact host-known counts unless a method says it reads one from the
// device. The CPU back end's machine (cpuMachine: the kernels in Go, run
// when called) is in this package; a GPU's comes from the registered
// Device. CPU devices run the protocol GPUs run.
type Machine interface {
	// Alloc returns a buffer of max(n, 1) elements (n is checked by the
	// caller); free returns it (work queued before stays ordered).
	Alloc(dt backend.DType, n int64) (backend.Buffer, error)
	Free(b backend.Buffer)
	// View is elements [off, off+n) of b.
	View(b backend.Buffer, off, n int64) backend.Buffer
	// Upload copies src ([]int32 or []int64 of dst's type) into dst.
	Upload(dst backend.Buffer, src any) error
	// Read waits for the queued work, then copies srcs[i][0:n[i]] (int64
	// buffers) one after another into dst.
	Read(dst []int64, srcs []backend.Buffer, n []int64) error

	// Route groups the frontier F[0:nF), nF = nFB[0] read on the device
	// (F holds fcap >= nF entries), by owner: sendIDs[j] in owner ranges
	// 0..P-1 of the order of parts (any order inside a range), pos[j] the
	// frontier position of sendIDs[j]. It writes the header rows (P rows
	// of hWords into hdr): status 0, the count for each owner, key, hop,
	// fanout and hops, nF and the number of nodes outside [0, NumNodes).
	// ctr is 2*(P+1) int64 of scratch.
	Route(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, key uint64, hop, fanout, hops int) error

	// DrawStrided draws hop h (fanout k > 0) for the R received nodes ids
	// (requester p's segment [seg[p], seg[p+1]) under keys[p]) into
	// fixed slots of ans (int32) and ansE (int64 global edge IDs): node
	// i's draws in [i*k, i*k+m), -1 in the rest.
	DrawStrided(h int, ids backend.Buffer, R int64, seg []int64, keys []uint64, ans, ansE backend.Buffer) error
	// UnpackStrided takes the answers in grouped order (row j of k slots
	// for sendIDs[j]) into frontier order: ptr (nF+1 row offsets), src
	// and eid (edge IDs from ansE, or -1 where ansE is nil).
	UnpackStrided(ptr, src, eid, ans, ansE, pos backend.Buffer, nF int64, k int) error

	// CountExact is a hop with fanout -1's count: qptr (R+1, the exclusive
	// scan of the received nodes' degrees) and tot (P+1 int64: edges per
	// requester segment roff, then their sum).
	CountExact(h int, ids backend.Buffer, R int64, roff []int64) (qptr, tot backend.Buffer, err error)
	// DrawExact draws it: packed (int32, R+E) holds, per requester
	// segment, its nodes' counts and then their neighbors; eid (int64, E)
	// the global edge IDs in received order.
	DrawExact(h int, ids, qptr backend.Buffer, R int64, roff []int64, keys []uint64, packed, eid backend.Buffer, E int64) error
	// UnpackExact takes the answers (owner q's message at bptr[q]+S[q]:
	// its counts, then its neighbors; edge IDs at S[q] of ansE, nil when
	// not asked) into frontier order: ptr, src and eid (-1 without ansE).
	UnpackExact(ptr, src, eid, ans, ansE, pos backend.Buffer, bptr, S []int64, nF, E int64) error

	// Relabel deduplicates [F[0:nF), src[0:e)] (ptr: nF+1 offsets; e may
	// be a bound, the device reads ptr[nF]): srcNodes (nF+e entries, the
	// first ns valid), local (the block's column indices) and sizes
	// (int64 {nF, edges, ns} on the device), as gpusample does.
	Relabel(F backend.Buffer, nF int64, src, ptr backend.Buffer, e int64) (srcNodes, local, sizes backend.Buffer, err error)

	// Batch turns a step's parts (proto.step's, sizes known) into the
	// back end's Batch of seeds; the parts are its from then on, and
	// freed on failure.
	Batch(outs []HopOut, seeds []graph.NodeID) (*Batch, error)
	// Shrink returns b's first n elements as a buffer that owns b's
	// memory (b is not used after).
	Shrink(b backend.Buffer, n int64) (backend.Buffer, error)
	// Close releases the machine's own memory (not the buffers it
	// returned).
	Close() error
}

// SamplerMachine is the node-wise Sampler's machine: a Machine over the
// rank's patch that can also sample it directly and open siblings.
type SamplerMachine interface {
	Machine
	// Sample draws the batch of seeds from the patch with the back end's
	// single-device sampler (one rank: the patch is the whole graph):
	// sample.NeighborSampler on the CPU, gpusample's SampleDevice on a
	// GPU. It is synchronous.
	Sample(seeds []graph.NodeID, key sample.Key) (*Batch, error)
	// Sibling returns the machine of the same patch on dev, another
	// handle of the same device (the CPU back end for a CPU machine),
	// reading this machine's topology in place. Close it before this one.
	Sibling(dev backend.Backend) (SamplerMachine, error)
}

// Device builds the machines of the back ends other than the CPU one
// that it accepts: package internal/cudadsp registers the CUDA machines
// (its kernels and gpusample's hop API) with RegisterDevice. Each
// constructor leaves nothing behind on failure; the machine's Close
// releases what it allocated (its copy of the patch included).
type Device interface {
	// Accepts reports whether be is a device this Device runs on.
	Accepts(be backend.Backend) bool
	// Sampler is the node-wise machine of rank's patch for P ranks with
	// partition offsets (cfg as New's).
	Sampler(be backend.Backend, patch *layout.Patch, offsets []int64, P int, cfg Config) (SamplerMachine, error)
	// Layer is the layer-wise machine (cfg as NewLayer's).
	Layer(be backend.Backend, patch *layout.Patch, offsets []int64, P int, cfg Config) (LayerMachine, error)
	// Walker is the walk machine for walks of length steps.
	Walker(be backend.Backend, patch *layout.Patch, offsets []int64, P, length int, placement gpusample.Placement) (WalkMachine, error)
}

// device is the registered Device (nil: CPU back ends only).
var device Device

// RegisterDevice makes the constructors use d's machines on the back
// ends d accepts. It is meant for an init function; it panics when
// called twice, since two packages would then claim the same devices.
func RegisterDevice(d Device) {
	if d == nil || device != nil {
		panic("csp: RegisterDevice called twice or with nil")
	}
	device = d
}

// exchanger is the part of comm.Comm the sampler uses.
type exchanger interface {
	AllToAll(ctx context.Context, dst, src backend.Buffer) error
	AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error
}

// Layout of a rank's control buffer (int64): header rows sent and
// received, the seeds' count (hop 0's device-side frontier size), the
// routing counters, and the totals rows of fanout -1 hops.
type ctlLayout struct{ P int }

func (c ctlLayout) sendHdr() int64  { return 0 }
func (c ctlLayout) recvHdr() int64  { return int64(c.P * HeaderWords) }
func (c ctlLayout) nSeeds() int64   { return int64(2 * c.P * HeaderWords) }
func (c ctlLayout) ctr() int64      { return c.nSeeds() + 1 }
func (c ctlLayout) sendTot() int64  { return c.ctr() + int64(2*(c.P+1)) }
func (c ctlLayout) recvTot() int64  { return c.sendTot() + int64(c.P*tWords) }
func (c ctlLayout) words() int64    { return c.recvTot() + int64(c.P*tWords) }
func (c ctlLayout) hdrWords() int64 { return int64(c.P * HeaderWords) }

// ReadWords is the most a single read brings back: both header halves,
// P+1 totals, the totals rows, or three sizes per hop (L <= maxHops).
func ReadWords(P int) int64 {
	return max(int64(2*P*HeaderWords), int64(P*tWords), int64(P+1), 3*maxHops)
}

// maxHops bounds Config.Fanouts; maxRanks bounds the group (the routing
// kernels count owners in shared memory).
const (
	maxHops  = 64
	maxRanks = 1024
)
