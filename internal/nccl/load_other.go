//go:build !(linux && (amd64 || arm64))

package nccl

import (
	"errors"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// Supported reports whether run-time loading works on this platform.
const Supported = false

type library struct {
	path    string
	version int

	getVersion, getUniqueID, commDestroy, commAbort, commGetAsyncError uintptr
	commCount, commCuDevice, commUserRank                              uintptr
	allReduce, broadcast, allGather, reduceScatter, send, recv         uintptr
	groupStart, groupEnd                                               uintptr
}

var (
	lib     *library
	loadErr = errors.New("nccl: run-time loading of libnccl is supported on linux/amd64 and linux/arm64 only")
)

// Load fails on this platform.
func Load() error { return loadErr }

func (l *library) errorString(Result) string { return "" }
func (l *library) lastError(Comm) string     { return "" }

func (l *library) initRank(comm *uintptr, nranks int32, id uniqueID, rank int32) int32 {
	return int32(InternalError)
}

func call(fn uintptr, args ...uintptr) uintptr { return uintptr(InternalError) }

func open(f *cudalib.Found) (*library, error) { return nil, loadErr }
