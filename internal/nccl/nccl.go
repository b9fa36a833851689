package nccl

import (
	"fmt"
	"unsafe"
)

// Result is an ncclResult_t.
type Result int32

// Result codes (nccl.h).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

// Name returns the enum name ("ncclSystemError"), or "ncclResult(N)".
func (r Result) Name() string {
	switch r {
	case Success:
		return "ncclSuccess"
	case UnhandledCudaError:
		return "ncclUnhandledCudaError"
	case SystemError:
		return "ncclSystemError"
	case InternalError:
		return "ncclInternalError"
	case InvalidArgument:
		return "ncclInvalidArgument"
	case InvalidUsage:
		return "ncclInvalidUsage"
	case RemoteError:
		return "ncclRemoteError"
	case InProgress:
		return "ncclInProgress"
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// DataType is an ncclDataType_t.
type DataType int32

// Data types used by Strata.
const (
	Int32   DataType = 2
	Int64   DataType = 4
	Float32 DataType = 7
)

// RedOp is an ncclRedOp_t.
type RedOp int32

// Reductions.
const (
	Sum RedOp = 0
	Max RedOp = 2
	Avg RedOp = 4 // NCCL >= 2.10
)

// Error is a failed NCCL call.
type Error struct {
	Call string // e.g. "ncclAllReduce"
	Code Result
	Desc string // ncclGetErrorString
	Last string // ncclGetLastError, when available and not empty
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (%d)", e.Call, e.Code.Name(), int32(e.Code))
	if e.Desc != "" {
		s += ": " + e.Desc
	}
	if e.Last != "" {
		s += " (last error: " + e.Last + ")"
	}
	return s
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code Result) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// UniqueIDBytes is the size of an ncclUniqueId.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: rank 0 makes one and every rank passes it
// to CommInitRank.
type UniqueID [UniqueIDBytes]byte

// uniqueID has the C struct's layout, for passing by value.
type uniqueID struct{ Internal [UniqueIDBytes]byte }

// Comm is an ncclComm_t.
type Comm uintptr

// Stream is a CUstream / cudaStream_t (0: the legacy default stream).
type Stream uintptr

// DevPtr is a device address.
type DevPtr uintptr

// Version returns NCCL's version code (22803 for 2.28.3); 0 before Load.
func Version() int {
	if lib == nil {
		return 0
	}
	return lib.version
}

// VersionString formats a version code as "2.28.3".
func VersionString(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

// LibPath returns the file libnccl was loaded from ("" before Load or when
// the loader did not tell).
func LibPath() string {
	if lib == nil {
		return ""
	}
	return lib.path
}

func loaded() error {
	if lib == nil {
		if loadErr != nil {
			return loadErr
		}
		return fmt.Errorf("nccl: library not loaded (call nccl.Load first)")
	}
	return nil
}

// check turns an ncclResult_t into an *Error (nil on success).
func check(call string, r uintptr, c Comm) error {
	code := Result(int32(uint32(r)))
	if code == Success {
		return nil
	}
	e := &Error{Call: call, Code: code}
	if lib != nil {
		e.Desc = lib.errorString(code)
		if c != 0 {
			e.Last = lib.lastError(c)
		}
	}
	return e
}

// GetUniqueID makes a new unique id (rank 0 only).
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := loaded(); err != nil {
		return id, err
	}
	err := check("ncclGetUniqueId", call(lib.getUniqueID, uintptr(unsafe.Pointer(&id[0]))), 0)
	return id, err
}

// CommInitRank joins rank of an nranks communicator identified by id. It
// blocks until every rank has joined. The device is the one whose context
// is current on the calling (locked) thread.
func CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	if err := loaded(); err != nil {
		return 0, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks || nranks > 1<<20 {
		return 0, fmt.Errorf("nccl: CommInitRank: rank %d of %d", rank, nranks)
	}
	var c uintptr
	r := lib.initRank(&c, int32(nranks), uniqueID{Internal: id}, int32(rank))
	if err := check("ncclCommInitRank", uintptr(uint32(r)), 0); err != nil {
		return 0, err
	}
	return Comm(c), nil
}

// Destroy waits for the communicator's pending operations and frees it.
func (c Comm) Destroy() error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclCommDestroy", call(lib.commDestroy, uintptr(c)), 0)
}

// Abort frees the communicator without waiting, stopping its operations
// in flight (use after a failure or timeout).
func (c Comm) Abort() error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclCommAbort", call(lib.commAbort, uintptr(c)), 0)
}

// AsyncError returns the communicator's asynchronous error: nil while it
// is healthy, an *Error (ncclRemoteError, ncclSystemError, ...) once an
// operation failed in the background (a peer died, a connection broke).
func (c Comm) AsyncError() error {
	if err := loaded(); err != nil {
		return err
	}
	var r int32
	if err := check("ncclCommGetAsyncError", call(lib.commGetAsyncError, uintptr(c), uintptr(unsafe.Pointer(&r))), c); err != nil {
		return err
	}
	if Result(r) == Success || Result(r) == InProgress {
		return nil
	}
	return check("ncclCommGetAsyncError (asynchronous error)", uintptr(uint32(r)), c)
}

// Count returns the number of ranks.
func (c Comm) Count() (int, error) {
	var n int32
	if err := loaded(); err != nil {
		return 0, err
	}
	err := check("ncclCommCount", call(lib.commCount, uintptr(c), uintptr(unsafe.Pointer(&n))), c)
	return int(n), err
}

// CuDevice returns the CUDA device ordinal the communicator uses.
func (c Comm) CuDevice() (int, error) {
	var n int32
	if err := loaded(); err != nil {
		return 0, err
	}
	err := check("ncclCommCuDevice", call(lib.commCuDevice, uintptr(c), uintptr(unsafe.Pointer(&n))), c)
	return int(n), err
}

// UserRank returns this communicator's rank.
func (c Comm) UserRank() (int, error) {
	var n int32
	if err := loaded(); err != nil {
		return 0, err
	}
	err := check("ncclCommUserRank", call(lib.commUserRank, uintptr(c), uintptr(unsafe.Pointer(&n))), c)
	return int(n), err
}

// AllReduce reduces count elements of send across ranks into recv (which
// may equal send), queued on stream.
func AllReduce(send, recv DevPtr, count int, dt DataType, op RedOp, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclAllReduce", call(lib.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(c), uintptr(s)), c)
}

// Broadcast copies count elements of root's send into every rank's recv
// (in place when send == recv).
func Broadcast(send, recv DevPtr, count int, dt DataType, root int, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclBroadcast", call(lib.broadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), uintptr(c), uintptr(s)), c)
}

// AllGather gathers sendCount elements from every rank, in rank order,
// into recv (nranks*sendCount elements).
func AllGather(send, recv DevPtr, sendCount int, dt DataType, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclAllGather", call(lib.allGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), uintptr(c), uintptr(s)), c)
}

// ReduceScatter reduces nranks*recvCount elements of send across ranks;
// rank r receives block r (recvCount elements) in recv.
func ReduceScatter(send, recv DevPtr, recvCount int, dt DataType, op RedOp, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclReduceScatter", call(lib.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), uintptr(c), uintptr(s)), c)
}

// Send sends count elements to peer (point to point; match with Recv on
// the peer, inside GroupStart/GroupEnd when several are in flight).
func Send(buf DevPtr, count int, dt DataType, peer int, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclSend", call(lib.send, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), uintptr(s)), c)
}

// Recv receives count elements from peer.
func Recv(buf DevPtr, count int, dt DataType, peer int, c Comm, s Stream) error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclRecv", call(lib.recv, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), uintptr(s)), c)
}

// GroupStart begins a group: the operations queued until GroupEnd are
// launched together (needed for all-to-all built from Send and Recv).
func GroupStart() error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclGroupStart", call(lib.groupStart), 0)
}

// GroupEnd launches the operations queued since GroupStart.
func GroupEnd() error {
	if err := loaded(); err != nil {
		return err
	}
	return check("ncclGroupEnd", call(lib.groupEnd), 0)
}
