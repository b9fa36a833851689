package comm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// KindGPUShm is the GPU variant of the shared-memory back end (device
// buffers copied through a pinned shared segment, reduced on the host).
const KindGPUShm = "gpushm"

// DeviceKinds lists the values --comm accepts for device communicators.
var DeviceKinds = []string{KindAuto, KindNCCL, KindGPUShm, KindShm, KindTCP}

// SelectDevice resolves --comm for a communicator of device buffers:
// auto picks NCCL when every GPU pair has peer-to-peer access and NCCL
// loads, the GPU shared-memory back end for ranks on one host otherwise,
// and TCP (device buffers staged through host memory) across hosts. "shm"
// means gpushm here. The second result says why.
func SelectDevice(kind string, t Topology) (string, string, error) {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", KindAuto:
		switch {
		case t.GPUs && t.PeerAccess && t.NCCL:
			return KindNCCL, "every GPU pair has peer-to-peer access", nil
		case t.SameHost:
			why := "all ranks are on one host"
			switch {
			case t.GPUs && !t.PeerAccess:
				why += " and not every GPU pair has peer-to-peer access"
			case t.GPUs:
				why += " and NCCL is not available"
			}
			return KindGPUShm, why, nil
		default:
			return KindTCP, "the ranks are on several hosts", nil
		}
	case KindNCCL:
		if !t.GPUs {
			return "", "", fmt.Errorf("comm: --comm nccl needs a GPU per rank")
		}
		if !t.NCCL {
			return "", "", fmt.Errorf("comm: --comm nccl: NCCL is not available in this build or on this host")
		}
		return KindNCCL, "requested", nil
	case KindGPUShm, KindShm:
		if !t.SameHost {
			return "", "", fmt.Errorf("comm: --comm %s needs every rank on one host", kind)
		}
		return KindGPUShm, "requested", nil
	case KindTCP:
		return KindTCP, "requested", nil
	}
	return "", "", fmt.Errorf("comm: unknown --comm %q for device buffers (want one of %s)", kind, strings.Join(DeviceKinds, ", "))
}

// DeviceCall is one validated collective as the front end holds it and a
// DeviceTransport sees it: the same fields as Call, with back-end buffers
// instead of byte views. AllReduce and Broadcast have Send == Recv (in
// place).
type DeviceCall struct {
	Op       Op
	Phase    Phase
	Seq      uint64
	DType    backend.DType
	Red      ReduceOp
	Root     int
	Deadline time.Time

	Send, Recv backend.Buffer

	// Per-rank element counts and offsets, as in Call.
	SendCounts, SendDispls []int
	RecvCounts, RecvDispls []int
}

// DeviceTransport is what a device back end implements (a host back end
// implements Transport); NewDevice puts the standard front end on it
// (validation, numbering, deadlines, debug checks, *OpError reporting,
// history). Run is called for one collective at a time, with arguments
// validated, for every group size (a back end handles a group of one
// itself).
type DeviceTransport interface {
	Kind() string
	Rank() int
	Size() int
	Caps() Caps
	// Backend is the compute back end whose buffers the transport takes
	// (Comm.Alloc allocates there).
	Backend() backend.Backend
	// Check returns an error saying why b (not nil, of a supported dtype)
	// cannot be used: another back end's or device's buffer, a freed one.
	Check(b backend.Buffer) error
	// Overlap reports whether two buffers share memory.
	Overlap(a, b backend.Buffer) bool
	// Run performs one collective; it must return by ctx's deadline (an
	// error wrapping context.DeadlineExceeded when it ran out of time).
	// When it returns nil the result may still be in flight on the back
	// end's stream, ordered before later work on it.
	Run(ctx context.Context, c *DeviceCall) error
	// Gather all-gathers len(words) int64 from every rank (rank order),
	// for the debug check of operation seq.
	Gather(ctx context.Context, seq uint64, words []int64) ([]int64, error)
	// Sync waits for every operation run so far to complete.
	Sync(ctx context.Context) error
	// Missing, Abort and Close are as in Transport.
	Missing(ctx context.Context, seq uint64) []int
	Abort(err *OpError)
	Close() error
}
