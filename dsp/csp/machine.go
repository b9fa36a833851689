package csp

import (
	"context"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Machine is what the protocol (proto) needs from one rank's device:
// buffers and the protocol's kernels. Every method but read queues work
// in order and returns without waiting for it; read waits (it is the
// host's only way to learn a device-side size). Sizes passed in are
// exact host-known counts unless a method says it reads one from the
// device. gpuMachine runs on a GPU, cpuMachine on the CPU back end (the
// kernels in Go, run when called): CPU devices run the protocol GPUs run.
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

// exchanger is the part of comm.DeviceComm the sampler uses.
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
