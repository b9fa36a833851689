//go:build linux && (amd64 || arm64)

package nccl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// Supported reports whether run-time loading works on this platform.
const Supported = true

// library holds the opened libnccl and its entry points.
type library struct {
	path    string
	version int

	getVersion, getUniqueID, commDestroy, commAbort, commGetAsyncError uintptr
	commCount, commCuDevice, commUserRank                              uintptr
	allReduce, broadcast, allGather, reduceScatter, send, recv         uintptr
	groupStart, groupEnd                                               uintptr

	initRank  func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
	errString func(r int32) string
	lastErr   func(comm uintptr) string // nil before NCCL 2.13
}

var (
	loadOnce sync.Once
	lib      *library
	loadErr  error
)

// Load opens libnccl once per process and resolves its entry points.
// Later calls return the first result.
func Load() error {
	loadOnce.Do(func() {
		f, err := cudalib.Open(cudalib.NCCL)
		if err != nil {
			loadErr = err
			return
		}
		l, err := open(f)
		if err != nil {
			loadErr = err
			return
		}
		lib = l
	})
	return loadErr
}

// open resolves the symbols of an opened library and reads its version.
func open(f *cudalib.Found) (*library, error) {
	l := &library{path: f.Path}
	where := f.Path
	if where == "" {
		where = f.Soname
	}
	syms := []struct {
		dst  *uintptr
		name string
	}{
		{&l.getVersion, "ncclGetVersion"},
		{&l.getUniqueID, "ncclGetUniqueId"},
		{&l.commDestroy, "ncclCommDestroy"},
		{&l.commAbort, "ncclCommAbort"},
		{&l.commGetAsyncError, "ncclCommGetAsyncError"},
		{&l.commCount, "ncclCommCount"},
		{&l.commCuDevice, "ncclCommCuDevice"},
		{&l.commUserRank, "ncclCommUserRank"},
		{&l.allReduce, "ncclAllReduce"},
		{&l.broadcast, "ncclBroadcast"},
		{&l.allGather, "ncclAllGather"},
		{&l.reduceScatter, "ncclReduceScatter"},
		{&l.send, "ncclSend"},
		{&l.recv, "ncclRecv"},
		{&l.groupStart, "ncclGroupStart"},
		{&l.groupEnd, "ncclGroupEnd"},
	}
	for _, s := range syms {
		p, err := cudalib.Sym(f.Handle, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("nccl: %s lacks symbol %s: not libnccl, or older than 2.7", where, s.name)
		}
		*s.dst = p
	}
	for _, s := range []struct {
		fn   any
		name string
	}{{&l.initRank, "ncclCommInitRank"}, {&l.errString, "ncclGetErrorString"}} {
		p, err := cudalib.Sym(f.Handle, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("nccl: %s lacks symbol %s", where, s.name)
		}
		purego.RegisterFunc(s.fn, p)
	}
	if p, err := cudalib.Sym(f.Handle, "ncclGetLastError"); err == nil && p != 0 {
		purego.RegisterFunc(&l.lastErr, p)
	}
	var v int32
	if r := call(l.getVersion, uintptr(unsafe.Pointer(&v))); r != 0 {
		return nil, fmt.Errorf("nccl: %s: ncclGetVersion returned %d", where, int32(r))
	}
	l.version = int(v)
	if l.version < 20700 {
		return nil, fmt.Errorf("nccl: %s is version %s; Strata needs 2.7 or newer", where, VersionString(l.version))
	}
	return l, nil
}

func (l *library) errorString(r Result) string { return l.errString(int32(r)) }

func (l *library) lastError(c Comm) string {
	if l.lastErr == nil {
		return ""
	}
	return l.lastErr(uintptr(c))
}

// call calls a C function taking only integer and pointer arguments and
// returns its 32-bit result. go:uintptrescapes keeps objects whose
// addresses are converted in the call expression alive during the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r))
}
