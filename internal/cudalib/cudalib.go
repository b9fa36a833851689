package cudalib

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// EnvPath is the environment variable holding extra library folders,
// colon separated, searched before everything else.
const EnvPath = "STRATA_CUDA_PATH"

// Lib describes one shared library to find.
type Lib struct {
	// Name is the short name used in messages, e.g. "libcuda".
	Name string
	// Sonames are tried in order, e.g. "libcuda.so.1".
	Sonames []string
	// Siblings are glob patterns, relative to the folder the library was
	// found in, of libraries to preload (RTLD_GLOBAL) before it. The
	// pattern may contain {major}, replaced by the soname's first version
	// number ("13" for libnvrtc.so.13).
	Siblings []string
}

// The libraries Strata uses.
var (
	Driver = Lib{Name: "libcuda", Sonames: []string{"libcuda.so.1", "libcuda.so"}}
	NVRTC  = Lib{
		Name:     "libnvrtc",
		Sonames:  []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
		Siblings: []string{"libnvrtc-builtins.so.{major}*"},
	}
	CUBLAS = Lib{
		Name:     "libcublas",
		Sonames:  []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
		Siblings: []string{"libcublasLt.so.{major}"},
	}
	NCCL = Lib{Name: "libnccl", Sonames: []string{"libnccl.so.2", "libnccl.so"}}
)

// Found is a library that was opened.
type Found struct {
	Lib    string  // short name, e.g. "libnvrtc"
	Soname string  // the soname that loaded
	Path   string  // file it came from ("" when the loader did not tell)
	Via    string  // "STRATA_CUDA_PATH", "loader" or "folder"
	Handle uintptr // dlopen handle
}

// NotFoundError says which library could not be opened and where it was
// looked for.
type NotFoundError struct {
	Lib     string
	Sonames []string
	Dirs    []string // folders searched, in order (the loader is listed as "<loader>")
	Errs    []string // dlopen errors for files that exist but failed to load
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cudalib: %s not found (sonames %s; searched %s)",
		e.Lib, strings.Join(e.Sonames, ", "), strings.Join(e.Dirs, ", "))
	if len(e.Errs) > 0 {
		fmt.Fprintf(&b, "; failed to load: %s", strings.Join(e.Errs, "; "))
	}
	fmt.Fprintf(&b, "; set %s to the folder that holds it", EnvPath)
	return b.String()
}

// Searcher opens libraries. The zero value is not usable; use Default or
// build one for tests.
type Searcher struct {
	// EnvDirs are searched first (from $STRATA_CUDA_PATH).
	EnvDirs []string
	// UseLoader enables step 2 (dlopen by bare soname).
	UseLoader bool
	// Dirs are the fixed folders of steps 3-5, in order.
	Dirs []string
	// Open dlopens a path or a bare soname with RTLD_NOW|RTLD_GLOBAL.
	Open func(name string) (uintptr, error)
	// Locate returns the file a bare soname was loaded from ("" if unknown).
	Locate func(soname string) string
}

// Default returns the searcher for this process: $STRATA_CUDA_PATH, the
// loader, then the fixed folders that exist on this machine.
func Default() *Searcher {
	return &Searcher{
		EnvDirs:   SplitPath(os.Getenv(EnvPath)),
		UseLoader: true,
		Dirs:      FixedDirs("/", os.Getenv),
		Open:      dlopen,
		Locate:    locateLoaded,
	}
}

// SplitPath splits a colon-separated folder list, dropping empty entries.
func SplitPath(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FixedDirs returns the existing folders of search steps 3-5 under root
// (normally "/"; tests pass a temporary folder), in search order. getenv
// supplies $HOME, $VIRTUAL_ENV and $CONDA_PREFIX.
func FixedDirs(root string, getenv func(string) string) []string {
	triplet := "x86_64-linux"
	gnu := "x86_64-linux-gnu"
	if runtime.GOARCH == "arm64" {
		triplet, gnu = "sbsa-linux", "aarch64-linux-gnu"
	}
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	var dirs []string
	// Toolkits, newest version first (cuda-13.0 before cuda-12.4 before cuda).
	toolkits, _ := filepath.Glob(j("usr/local/cuda*"))
	sort.Slice(toolkits, func(a, b int) bool { return versionLess(toolkits[b], toolkits[a]) })
	for _, t := range toolkits {
		dirs = append(dirs, filepath.Join(t, "targets", triplet, "lib"))
	}
	dirs = append(dirs, j("usr/local/cuda/lib64"))
	// Driver folders.
	dirs = append(dirs, j("usr/local/nvidia/lib64"), j("usr/lib", gnu), j("usr/lib64"))
	// Python wheels.
	var sites []string
	for _, pat := range []string{
		"usr/lib/python3*/site-packages", "usr/lib/python3*/dist-packages",
		"usr/local/lib/python3*/site-packages", "usr/local/lib/python3*/dist-packages",
		"opt/*/lib/python3*/site-packages", "opt/*/.venv/lib/python3*/site-packages",
		"opt/*/*/lib/python3*/site-packages",
	} {
		m, _ := filepath.Glob(j(pat))
		sites = append(sites, m...)
	}
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := getenv(env); v != "" {
			m, _ := filepath.Glob(filepath.Join(root, v, "lib/python3*/site-packages"))
			sites = append(sites, m...)
		}
	}
	if h := getenv("HOME"); h != "" {
		m, _ := filepath.Glob(filepath.Join(root, h, ".local/lib/python3*/site-packages"))
		sites = append(sites, m...)
	}
	for _, s := range sites {
		for _, sub := range []string{"nvidia/cu13/lib", "nvidia/cu12/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cublas/lib", "nvidia/nccl/lib"} {
			dirs = append(dirs, filepath.Join(s, sub))
		}
	}
	// Keep folders that exist, each once.
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		d = filepath.Clean(d)
		if seen[d] {
			continue
		}
		seen[d] = true
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// versionLess orders toolkit folders so that "cuda-12.4" < "cuda-13.0" and
// an unversioned "cuda" (usually a symlink) sorts last when reversed.
func versionLess(a, b string) bool {
	va, vb := toolkitVersion(a), toolkitVersion(b)
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	if len(va) != len(vb) {
		return len(va) < len(vb)
	}
	return a < b
}

func toolkitVersion(p string) []int {
	base := filepath.Base(p)
	_, ver, ok := strings.Cut(base, "-")
	if !ok {
		return nil
	}
	var out []int
	for _, f := range strings.Split(ver, ".") {
		n := 0
		for _, c := range f {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}

// Find opens lib, trying the search steps in order.
func (s *Searcher) Find(lib Lib) (*Found, error) {
	nf := &NotFoundError{Lib: lib.Name, Sonames: lib.Sonames}
	tryDir := func(dir, via string) *Found {
		for _, so := range lib.Sonames {
			p := filepath.Join(dir, so)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			s.preload(lib, so, dir)
			h, err := s.Open(p)
			if err != nil {
				nf.Errs = append(nf.Errs, fmt.Sprintf("%s: %v", p, err))
				continue
			}
			return &Found{Lib: lib.Name, Soname: so, Path: p, Via: via, Handle: h}
		}
		return nil
	}
	for _, d := range s.EnvDirs {
		nf.Dirs = append(nf.Dirs, d+" ("+EnvPath+")")
		if f := tryDir(d, EnvPath); f != nil {
			return f, nil
		}
	}
	if s.UseLoader {
		nf.Dirs = append(nf.Dirs, "<loader>")
		for _, so := range lib.Sonames {
			h, err := s.Open(so)
			if err != nil {
				continue
			}
			f := &Found{Lib: lib.Name, Soname: so, Via: "loader", Handle: h}
			if s.Locate != nil {
				f.Path = s.Locate(so)
			}
			if f.Path != "" {
				s.preload(lib, so, filepath.Dir(f.Path))
			}
			return f, nil
		}
	}
	for _, d := range s.Dirs {
		nf.Dirs = append(nf.Dirs, d)
		if f := tryDir(d, "folder"); f != nil {
			return f, nil
		}
	}
	return nil, nf
}

// preload opens lib's siblings found in dir. Failures are ignored: the
// library itself may still load (its loader path may cover them).
func (s *Searcher) preload(lib Lib, soname, dir string) {
	major := sonameMajor(soname)
	for _, pat := range lib.Siblings {
		s.openIn(dir, strings.ReplaceAll(pat, "{major}", major))
	}
}

// openIn opens the first file in dir matching pattern that opens (glob
// order); path is "" when none did, errs says why each failed.
func (s *Searcher) openIn(dir, pattern string) (path string, h uintptr, errs []string) {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	sort.Strings(m)
	for _, p := range m {
		h, err := s.Open(p)
		if err == nil {
			return p, h, errs
		}
		errs = append(errs, fmt.Sprintf("%s: %v", p, err))
	}
	return "", 0, errs
}

// Sibling opens a library that lives next to f (one of lib's Siblings
// patterns, e.g. "libcublasLt.so.{major}" for libcublas), {major} replaced
// by the major version of f's soname, so the sibling matches the loaded
// library's version: first the matching files in f's folder (glob order),
// then, when the pattern is a plain soname, that soname through the loader
// (which returns the copy already loaded as f's dependency). Siblings are
// preloaded before their library (Find); Sibling returns a handle whose
// symbols the caller can resolve with Sym.
func (s *Searcher) Sibling(f *Found, pattern string) (*Found, error) {
	so := strings.ReplaceAll(pattern, "{major}", sonameMajor(f.Soname))
	name := so // the short name: "libcublasLt" for "libcublasLt.so.13"
	if i := strings.Index(so, ".so"); i > 0 {
		name = so[:i]
	}
	nf := &NotFoundError{Lib: name, Sonames: []string{so}}
	if f.Path != "" {
		dir := filepath.Dir(f.Path)
		nf.Dirs = append(nf.Dirs, dir)
		p, h, errs := s.openIn(dir, so)
		nf.Errs = append(nf.Errs, errs...)
		if p != "" {
			return &Found{Lib: name, Soname: filepath.Base(p), Path: p, Via: "folder", Handle: h}, nil
		}
	}
	if strings.ContainsAny(so, "*?[") {
		return nil, nf
	}
	nf.Dirs = append(nf.Dirs, "<loader>")
	h, err := s.Open(so)
	if err != nil {
		nf.Errs = append(nf.Errs, fmt.Sprintf("%s: %v", so, err))
		return nil, nf
	}
	out := &Found{Lib: name, Soname: so, Via: "loader", Handle: h}
	if s.Locate != nil {
		out.Path = s.Locate(so)
	}
	return out, nil
}

// OpenSibling opens a sibling of f (Searcher.Sibling) with this process's
// dlopen.
func OpenSibling(f *Found, pattern string) (*Found, error) {
	return (&Searcher{Open: dlopen, Locate: locateLoaded}).Sibling(f, pattern)
}

// sonameMajor returns "13" for "libnvrtc.so.13" and "11" for
// "libnvrtc.so.11.2"; "" when there is no version.
func sonameMajor(so string) string {
	_, ver, ok := strings.Cut(so, ".so.")
	if !ok {
		return ""
	}
	major, _, _ := strings.Cut(ver, ".")
	return major
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*Found{}
	cacheE  = map[string]error{}
)

// Open finds lib with the default searcher once per process and returns
// the same result (or error) afterwards.
func Open(lib Lib) (*Found, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if f, ok := cache[lib.Name]; ok {
		return f, nil
	}
	if err, ok := cacheE[lib.Name]; ok {
		return nil, err
	}
	f, err := Default().Find(lib)
	if err != nil {
		cacheE[lib.Name] = err
		return nil, err
	}
	cache[lib.Name] = f
	return f, nil
}

// locateLoaded finds the file of a loaded library by its soname in
// /proc/self/maps (Linux), so that messages and `strata info` can say
// where a library came from even when the loader found it.
func locateLoaded(soname string) string {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		p := line[i:]
		if filepath.Base(p) == soname {
			return p
		}
	}
	// The soname is often a symlink to a longer name (libcuda.so.1 ->
	// libcuda.so.580.95.05): match "libcuda.so" as a prefix.
	k := strings.Index(soname, ".so")
	if k < 0 {
		return ""
	}
	prefix := soname[:k+3]
	for _, line := range strings.Split(string(data), "\n") {
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		p := line[i:]
		if strings.HasPrefix(filepath.Base(p), prefix) {
			return p
		}
	}
	return ""
}
