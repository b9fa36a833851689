package nccl

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cudalib"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

func TestResultNamesAndErrors(t *testing.T) {
	if InvalidUsage.Name() != "ncclInvalidUsage" || Result(42).Name() != "ncclResult(42)" {
		t.Fatalf("names: %q %q", InvalidUsage.Name(), Result(42).Name())
	}
	e := &Error{Call: "ncclAllReduce", Code: RemoteError, Desc: "remote process exited", Last: "peer 1 gone"}
	msg := e.Error()
	for _, want := range []string{"ncclAllReduce", "ncclRemoteError", "(6)", "remote process exited", "peer 1 gone"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if !IsCode(e, RemoteError) || IsCode(e, SystemError) || IsCode(errors.New("x"), RemoteError) {
		t.Error("IsCode")
	}
	if check("x", 0, 0) != nil {
		t.Error("check(success) != nil")
	}
	if err := check("ncclBroadcast", uintptr(InvalidArgument), 0); !IsCode(err, InvalidArgument) || !strings.Contains(err.Error(), "ncclBroadcast") {
		t.Errorf("check: %v", err)
	}
	if VersionString(22803) != "2.28.3" || VersionString(2708) != "2.7.8" {
		t.Errorf("VersionString: %s %s", VersionString(22803), VersionString(2708))
	}
}

// TestLoadWithoutLibrary: where libnccl is missing (CI) Load must fail
// with an error that names the library and how to point at it; every
// call then returns that error instead of crashing.
func TestLoadWithoutLibrary(t *testing.T) {
	err := Load()
	if err == nil {
		t.Skipf("libnccl %s loaded from %s", VersionString(Version()), LibPath())
	}
	if Supported {
		var nf *cudalib.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("Load: %v (%T), want *cudalib.NotFoundError", err, err)
		}
		for _, want := range []string{"libnccl", "libnccl.so.2", cudalib.EnvPath} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
	}
	if _, e := GetUniqueID(); e != err {
		t.Errorf("GetUniqueID: %v, want the load error", e)
	}
	if _, e := CommInitRank(2, UniqueID{}, 0); e != err {
		t.Errorf("CommInitRank: %v, want the load error", e)
	}
	if e := AllReduce(0, 0, 1, Float32, Sum, 0, 0); e != err {
		t.Errorf("AllReduce: %v, want the load error", e)
	}
	if e := GroupStart(); e != err {
		t.Errorf("GroupStart: %v", e)
	}
	if Version() != 0 || LibPath() != "" {
		t.Error("Version or LibPath set without a library")
	}
}

// TestWrongLibraryIsRejected points the search at a library that is not
// NCCL (the C library under the name libnccl.so.2): it loads, but the
// symbol check must refuse it with a clear message.
func TestWrongLibraryIsRejected(t *testing.T) {
	if !Supported {
		t.Skip("no run-time loading on this platform")
	}
	var libc string
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			libc = p
			break
		}
	}
	if libc == "" {
		t.Skip("no libc.so.6 found")
	}
	dir := t.TempDir()
	if err := os.Symlink(libc, filepath.Join(dir, "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	s := cudalib.Default()
	s.EnvDirs, s.UseLoader, s.Dirs = []string{dir}, false, nil
	f, err := s.Find(cudalib.NCCL)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if f.Via != cudalib.EnvPath {
		t.Fatalf("found via %s", f.Via)
	}
	_, err = open(f)
	if err == nil || !strings.Contains(err.Error(), "lacks symbol ncclGetVersion") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("open(libc) = %v, want a missing-symbol error naming the file", err)
	}
}

// TestSingleRankOnGPU runs every bound collective on a communicator of one
// rank (needs a GPU and libnccl; skipped otherwise).
func TestSingleRankOnGPU(t *testing.T) {
	if err := Load(); err != nil {
		t.Skip(err)
	}
	dev, err := cuda.Open(0, cuda.Options{})
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	t.Logf("NCCL %s from %s", VersionString(Version()), LibPath())
	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) - 300.5
	}
	bufs := make([]*cuda.Buffer, 5)
	for i := range bufs {
		b, err := dev.Alloc(backend.Float32, n)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Free(b)
		bufs[i] = b.(*cuda.Buffer)
	}
	a, bc, ag, rs, p2p := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
	for _, b := range []*cuda.Buffer{a, bc} {
		if err := dev.Upload(b, x); err != nil {
			t.Fatal(err)
		}
	}
	var c Comm
	err = dev.Do(func(l *cuda.Locked) error {
		id, err := GetUniqueID()
		if err != nil {
			return err
		}
		if id == (UniqueID{}) {
			t.Error("unique id is all zero")
		}
		if c, err = CommInitRank(1, id, 0); err != nil {
			return err
		}
		s := Stream(l.Stream())
		p := func(b *cuda.Buffer) DevPtr { return DevPtr(b.Ptr()) }
		if err := AllReduce(p(a), p(a), n, Float32, Sum, c, s); err != nil {
			return err
		}
		if err := Broadcast(p(bc), p(bc), n, Float32, 0, c, s); err != nil {
			return err
		}
		if err := AllGather(p(a), p(ag), n, Float32, c, s); err != nil {
			return err
		}
		if err := ReduceScatter(p(ag), p(rs), n, Float32, Max, c, s); err != nil {
			return err
		}
		if err := GroupStart(); err != nil {
			return err
		}
		if err := Send(p(bc), n, Float32, 0, c, s); err != nil {
			return err
		}
		if err := Recv(p(p2p), n, Float32, 0, c, s); err != nil {
			return err
		}
		if err := GroupEnd(); err != nil {
			return err
		}
		return l.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs {
		got := make([]float32, n)
		if err := dev.Download(got, b); err != nil {
			t.Fatal(err)
		}
		for j := range got {
			if got[j] != x[j] {
				t.Fatalf("buffer %d element %d = %v, want %v", i, j, got[j], x[j])
			}
		}
	}
	if k, err := c.Count(); err != nil || k != 1 {
		t.Errorf("Count = %d, %v", k, err)
	}
	if r, err := c.UserRank(); err != nil || r != 0 {
		t.Errorf("UserRank = %d, %v", r, err)
	}
	if err := c.AsyncError(); err != nil {
		t.Errorf("AsyncError: %v", err)
	}
	// A bad argument comes back as an *Error with NCCL's description.
	err = dev.Do(func(l *cuda.Locked) error {
		if d, err := c.CuDevice(); err != nil || d != 0 {
			t.Errorf("CuDevice = %d, %v", d, err)
		}
		return AllReduce(DevPtr(a.Ptr()), DevPtr(a.Ptr()), n, DataType(99), Sum, c, Stream(l.Stream()))
	})
	if !IsCode(err, InvalidArgument) || err.(*Error).Desc == "" {
		t.Errorf("AllReduce with a bad dtype: %v, want ncclInvalidArgument with a description", err)
	} else {
		t.Logf("bad dtype: %v", err)
	}
	if err := dev.Do(func(*cuda.Locked) error { return c.Destroy() }); err != nil {
		t.Fatal(err)
	}
}

// TestFakeLibrary builds a stand-in libnccl.so.2 (testdata/fake_nccl.c)
// with the system C compiler and checks the calls against it, above all
// that ncclCommInitRank receives the 128-byte unique id by value intact
// (a corrupted byte must be refused) and its integer arguments in the
// right registers. Skipped without a C compiler.
func TestFakeLibrary(t *testing.T) {
	if !Supported {
		t.Skip("no run-time loading on this platform")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			t.Skip("no C compiler")
		}
	}
	dir := t.TempDir()
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", filepath.Join(dir, "libnccl.so.2"), "testdata/fake_nccl.c").CombinedOutput()
	if err != nil {
		t.Skipf("cannot build the stand-in library: %v\n%s", err, out)
	}
	s := cudalib.Default()
	s.EnvDirs, s.UseLoader, s.Dirs = []string{dir}, false, nil
	f, err := s.Find(cudalib.NCCL)
	if err != nil {
		t.Fatal(err)
	}
	l, err := open(f)
	if err != nil {
		t.Fatal(err)
	}
	if l.version != 22803 {
		t.Fatalf("version %d", l.version)
	}
	var id UniqueID
	if r := call(l.getUniqueID, uintptr(unsafe.Pointer(&id[0]))); r != 0 {
		t.Fatalf("ncclGetUniqueId = %d", r)
	}
	var c uintptr
	if r := l.initRank(&c, 5, uniqueID{Internal: id}, 3); r != 0 {
		t.Fatalf("ncclCommInitRank = %d (%s)", r, l.lastError(Comm(c)))
	}
	var n, rank int32
	call(l.commCount, c, uintptr(unsafe.Pointer(&n)))
	call(l.commUserRank, c, uintptr(unsafe.Pointer(&rank)))
	if n != 5 || rank != 3 {
		t.Fatalf("communicator says %d ranks, rank %d; want 5, 3", n, rank)
	}
	id[77]++
	if r := l.initRank(&c, 5, uniqueID{Internal: id}, 3); Result(r) != InvalidArgument {
		t.Fatalf("a corrupted id was accepted (%d)", r)
	}
	if got := l.errorString(InvalidArgument); got != "invalid argument (fake)" {
		t.Errorf("ncclGetErrorString = %q", got)
	}
	if got := l.lastError(Comm(c)); got != "bad id byte" {
		t.Errorf("ncclGetLastError = %q", got)
	}
}
