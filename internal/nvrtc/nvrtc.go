package nvrtc

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cudalib"
)

// Error is a failed NVRTC call; Log holds the compiler output when the
// call was nvrtcCompileProgram.
type Error struct {
	Call string
	Code int
	Name string
	Log  string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nvrtc: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Log != "" {
		s += "\n" + strings.TrimSpace(e.Log)
	}
	return s
}

type lib struct {
	found        *cudalib.Found
	major, minor int
	archs        []int // supported sm numbers (90 for sm_90), ascending

	version, create, destroy, compile, logSize, getLog uintptr
	cubinSize, getCubin, ptxSize, getPtx, errString    uintptr
	numArchs, getArchs                                 uintptr
}

var (
	loadOnce sync.Once
	l        *lib
	loadErr  error
)

// Load opens libnvrtc once per process.
func Load() error {
	loadOnce.Do(func() { l, loadErr = open() })
	return loadErr
}

func open() (*lib, error) {
	if !cudalib.Supported {
		return nil, fmt.Errorf("nvrtc: run-time loading is not supported on this platform")
	}
	f, err := cudalib.Open(cudalib.NVRTC)
	if err != nil {
		return nil, err
	}
	x := &lib{found: f}
	syms := []struct {
		dst  *uintptr
		name string
		opt  bool
	}{
		{&x.version, "nvrtcVersion", false},
		{&x.create, "nvrtcCreateProgram", false},
		{&x.destroy, "nvrtcDestroyProgram", false},
		{&x.compile, "nvrtcCompileProgram", false},
		{&x.logSize, "nvrtcGetProgramLogSize", false},
		{&x.getLog, "nvrtcGetProgramLog", false},
		{&x.cubinSize, "nvrtcGetCUBINSize", false},
		{&x.getCubin, "nvrtcGetCUBIN", false},
		{&x.ptxSize, "nvrtcGetPTXSize", false},
		{&x.getPtx, "nvrtcGetPTX", false},
		{&x.errString, "nvrtcGetErrorString", false},
		{&x.numArchs, "nvrtcGetNumSupportedArchs", true},
		{&x.getArchs, "nvrtcGetSupportedArchs", true},
	}
	for _, s := range syms {
		p, err := cudalib.Sym(f.Handle, s.name)
		if err != nil || p == 0 {
			if s.opt {
				continue
			}
			return nil, fmt.Errorf("nvrtc: %s (%s) lacks %s", f.Lib, f.Path, s.name)
		}
		*s.dst = p
	}
	var major, minor int32
	if err := x.check("nvrtcVersion", call(x.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))), nil); err != nil {
		return nil, err
	}
	x.major, x.minor = int(major), int(minor)
	if x.numArchs != 0 && x.getArchs != 0 {
		var n int32
		if call(x.numArchs, uintptr(unsafe.Pointer(&n))) == 0 && n > 0 && n < 1024 {
			archs := make([]int32, n)
			if call(x.getArchs, uintptr(unsafe.Pointer(&archs[0]))) == 0 {
				for _, a := range archs {
					x.archs = append(x.archs, int(a))
				}
				sort.Ints(x.archs)
			}
		}
	}
	return x, nil
}

func (x *lib) check(callName string, r uintptr, prog *uintptr) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: callName, Code: int(r), Name: fmt.Sprintf("nvrtcResult %d", int(r))}
	if x.errString != 0 {
		if p, _ := callPtr(x.errString, r); p != nil {
			e.Name = goString(p)
		}
	}
	if prog != nil {
		e.Log = x.programLog(*prog)
	}
	return e
}

// Version returns NVRTC's (major, minor) version; (0, 0) before Load.
func Version() (major, minor int) {
	if l == nil {
		return 0, 0
	}
	return l.major, l.minor
}

// LibPath returns the file libnvrtc was loaded from.
func LibPath() string {
	if l == nil {
		return ""
	}
	return l.found.Path
}

// SupportedArchs lists the sm numbers NVRTC can emit CUBIN for (nil when
// this NVRTC cannot say).
func SupportedArchs() []int {
	if l == nil {
		return nil
	}
	return append([]int(nil), l.archs...)
}

// Kind is the type of a compiled image.
type Kind uint8

const (
	CUBIN Kind = iota + 1
	PTX
)

func (k Kind) String() string {
	if k == CUBIN {
		return "cubin"
	}
	return "ptx"
}

// Target picks what to build for a device of compute capability sm (90 for
// 9.0): CUBIN for sm when NVRTC supports it, else PTX for the newest
// supported architecture <= sm.
func Target(sm int) (Kind, int, error) {
	if err := Load(); err != nil {
		return 0, 0, err
	}
	if len(l.archs) == 0 { // old NVRTC: try CUBIN and let it fail loudly
		return CUBIN, sm, nil
	}
	best := 0
	for _, a := range l.archs {
		if a == sm {
			return CUBIN, sm, nil
		}
		if a < sm {
			best = a
		}
	}
	if best == 0 {
		return 0, 0, fmt.Errorf("nvrtc: %d.%d supports no architecture at or below sm_%d (supports %v)", l.major, l.minor, sm, l.archs)
	}
	return PTX, best, nil
}

// Compile compiles src (file name is used in messages) to the given kind
// for architecture arch (90 for sm_90 / compute_90) with extra options.
// PTX output is NUL-terminated, ready for cuModuleLoadData.
func Compile(src, name string, kind Kind, arch int, options ...string) ([]byte, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	x := l
	csrc := cstr(src)
	cname := cstr(name)
	var prog uintptr
	if err := x.check("nvrtcCreateProgram", call(x.create, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0), nil); err != nil {
		return nil, err
	}
	defer call(x.destroy, uintptr(unsafe.Pointer(&prog)))

	archOpt := fmt.Sprintf("-arch=sm_%d", arch)
	if kind == PTX {
		archOpt = fmt.Sprintf("-arch=compute_%d", arch)
	}
	opts := append([]string{archOpt}, options...)
	cs := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		cs[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cs[i][0]))
	}
	r := call(x.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cs)
	if err := x.check("nvrtcCompileProgram", r, &prog); err != nil {
		e := err.(*Error)
		e.Log = fmt.Sprintf("compiling %s with %s:\n%s", name, strings.Join(opts, " "), e.Log)
		return nil, e
	}
	sizeFn, getFn, what := x.cubinSize, x.getCubin, "CUBIN"
	if kind == PTX {
		sizeFn, getFn, what = x.ptxSize, x.getPtx, "PTX"
	}
	var n uintptr
	if err := x.check("nvrtcGet"+what+"Size", call(sizeFn, prog, uintptr(unsafe.Pointer(&n))), nil); err != nil {
		return nil, err
	}
	if n == 0 || n > 1<<30 {
		return nil, fmt.Errorf("nvrtc: %s of %s has implausible size %d", what, name, n)
	}
	out := make([]byte, n)
	if err := x.check("nvrtcGet"+what, call(getFn, prog, uintptr(unsafe.Pointer(&out[0]))), nil); err != nil {
		return nil, err
	}
	return out, nil
}

func (x *lib) programLog(prog uintptr) string {
	var n uintptr
	if call(x.logSize, prog, uintptr(unsafe.Pointer(&n))) != 0 || n <= 1 || n > 1<<24 {
		return ""
	}
	buf := make([]byte, n)
	if call(x.getLog, prog, uintptr(unsafe.Pointer(&buf[0]))) != 0 {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00")
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func goString(p *byte) string {
	n := 0
	for n < 1<<16 && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
