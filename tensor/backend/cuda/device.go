package cuda

import (
	"embed"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cublas"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/nvrtc"
	"github.com/strata-gnn/strata/tensor/backend"
)

func init() {
	backend.Register("cuda", func(index int) (backend.Backend, error) {
		d, err := Open(index, Options{})
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}

// Options configure a Device. The zero value is the default.
type Options struct {
	// Precision is what Gemm rounds its inputs to (default FP32, full
	// float32 products): TF32 runs cuBLAS in TF32 tensor-core math,
	// BF16 runs cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF (package
	// backend's doc, # Precision).
	Precision backend.Precision
	// HighPriority gives the handle's stream the device's greatest
	// scheduling priority: its kernels take free SMs before those of
	// default streams. Pipelines use it for short, latency-bound stages
	// (sampling, feature loading) that share a GPU with a trainer whose
	// large kernels would otherwise hold them back.
	HighPriority bool
}

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// CommonSource returns the shared CUDA C definitions (integer types,
// GRID_STRIDE, the counter-based RNG of internal/rng, index-error slots),
// for packages that compile their own kernels with Device.LoadModule.
func CommonSource() string {
	b, _ := kernelFS.ReadFile("kernels/common.cuh")
	return string(b)
}

func backendSource() string {
	var sb strings.Builder
	sb.WriteString(CommonSource())
	for _, f := range []string{"kernels/dense.cu", "kernels/sparse.cu", "kernels/sort.cu", "kernels/spmm.cu", "kernels/fused.cu"} {
		b, _ := kernelFS.ReadFile(f)
		sb.WriteString("\n// ---- " + f + "\n")
		sb.Write(b)
	}
	return sb.String()
}

// hostScratchBytes is the pinned host area of each Device: cuBLAS scalars,
// index-error slots and small results are staged there.
const hostScratchBytes = 64 << 10

// Offsets into the pinned scratch area.
const (
	offScalars = 0    // 2 float32: Gemm alpha, beta
	offResult  = 256  // small results: Sum's float64, one index value
	offSlots   = 1024 // maxChecks uint64: index-error slots
)

// Device is one GPU: it implements backend.Backend, and exposes its
// stream, modules and memory to the GPU sampler and feature store.
//
// All methods are safe for concurrent use: they serialize on the
// Device's lock and queue work on the Device's single stream, in call
// order. Each method locks its goroutine to an OS thread and makes the
// device's primary context current there for the duration of the call.
type Device struct {
	mu      sync.Mutex
	ordinal int
	name    string
	dev     cu.Device
	ctx     cu.Context
	stream  cu.Stream
	blas    *cublas.Handle
	blasWS  cu.DevPtr      // the handle's workspace (cublas.SetWorkspace), 0 if none
	lt      *cublas.Pinned // pinned cuBLASLt products (Gemm), nil when off
	ltMem   cu.DevPtr      // lt's scratch, cublas.PinnedScratchBytes
	ltReq   cublas.GemmRequest
	host    unsafe.Pointer // pinned scratch, hostScratchBytes
	mods    map[string]*Module
	fns     map[string]cu.Function
	alloc   allocator
	checks  checker
	stage   stager
	prof    profiler
	sms     int
	cc      [2]int
	total   uint64
	prec    backend.Precision
	poison  bool // AllocRaw fills with NaN (EnvPoison)

	highPriority bool // Options.HighPriority
	priority     int  // the stream's priority (0: default)
	closed       bool
	kinfo        KernelInfo
}

var _ backend.Backend = (*Device)(nil)

// KernelInfo says how the back end's kernels were obtained.
type KernelInfo struct {
	Kind     string // "cubin" or "ptx"
	Arch     int    // 90 for sm_90
	CacheHit bool   // loaded from the on-disk cache
	CacheDir string // "" when caching is off
}

// OpenError is returned when a device cannot be opened.
type OpenError struct {
	Device string
	Err    error
}

func (e *OpenError) Error() string { return "cuda: cannot open " + e.Device + ": " + e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// Open opens GPU ordinal with its primary context, a stream, a cuBLAS
// handle and the back end's kernels (compiled by NVRTC on first use and
// cached on disk).
func Open(ordinal int, opt Options) (*Device, error) {
	spec := fmt.Sprintf("cuda:%d", ordinal)
	fail := func(err error) (*Device, error) { return nil, &OpenError{Device: spec, Err: err} }
	if err := cu.Load(); err != nil {
		return fail(err)
	}
	if err := nvrtc.Load(); err != nil {
		return fail(fmt.Errorf("kernels cannot be compiled: %w", err))
	}
	if err := cublas.Load(); err != nil {
		return fail(err)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return fail(err)
	}
	if !opt.Precision.Valid() {
		return fail(fmt.Errorf("unknown precision %v", opt.Precision))
	}
	d := &Device{ordinal: ordinal, name: spec, dev: dev, mods: map[string]*Module{}, fns: map[string]cu.Function{}}
	d.prec = opt.Precision
	d.highPriority = opt.HighPriority
	d.poison = envBool(EnvPoison)
	if err := d.init(); err != nil {
		d.Close()
		return fail(err)
	}
	return d, nil
}

func envBool(name string) bool {
	v, _ := strconv.ParseBool(strings.TrimSpace(os.Getenv(name)))
	return v
}

func (d *Device) init() error {
	var err error
	if d.cc[0], d.cc[1], err = d.dev.ComputeCapability(); err != nil {
		return err
	}
	if d.sms, err = d.dev.Attribute(cu.AttrMultiprocessorCount); err != nil {
		return err
	}
	if d.total, err = d.dev.TotalMem(); err != nil {
		return err
	}
	if d.ctx, err = d.dev.PrimaryCtxRetain(); err != nil {
		return err
	}
	unbind, err := d.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	prio := 0
	if d.highPriority {
		if _, prio, err = cu.StreamPriorityRange(); err != nil {
			return err
		}
	}
	if d.stream, err = cu.StreamCreatePriority(cu.StreamNonBlocking, prio); err != nil {
		return err
	}
	d.priority = prio
	if d.host, err = cu.MemHostAlloc(hostScratchBytes, cu.HostAllocPortable); err != nil {
		return err
	}
	d.alloc = allocator{name: d.name, sync: d.stream.Synchronize}
	if d.blas, err = cublas.Create(unsafe.Add(d.host, offScalars)); err != nil {
		return err
	}
	if err = d.blas.SetStream(uintptr(d.stream)); err != nil {
		return err
	}
	if d.blasWS, err = cu.MemAlloc(cublas.WorkspaceBytes); err != nil {
		return err
	}
	var set bool
	if set, err = d.blas.SetWorkspace(uintptr(d.blasWS), cublas.WorkspaceBytes); err != nil || !set {
		if ferr := cu.MemFree(d.blasWS); err == nil {
			err = ferr // a library without cublasSetWorkspace keeps its own
		}
		d.blasWS = 0
		if err != nil {
			return err
		}
	}
	if err = d.blas.SetTF32(d.prec == backend.TF32); err != nil {
		return err
	}
	if err = d.initPinned(); err != nil {
		return err
	}
	if err = d.checks.init(d); err != nil {
		return err
	}
	if err = d.stage.init(); err != nil {
		return err
	}
	m, info, err := d.loadModuleLocked("backend", backendSource())
	if err != nil {
		return err
	}
	d.kinfo = info
	d.fns = m.fns
	return nil
}

// Close releases the device's memory, stream and context reference.
// Buffers must not be used afterwards.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.ctx == 0 {
		d.closed = true
		return nil
	}
	unbind, err := d.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if d.stream != 0 {
		keep(d.stream.Synchronize())
	}
	keep(d.alloc.release())
	keep(d.stage.release())
	keep(d.prof.release())
	if d.checks.slots != 0 {
		keep(cu.MemFree(d.checks.slots))
	}
	for _, m := range d.mods {
		keep(m.m.Unload())
	}
	if d.lt != nil {
		keep(d.lt.Close())
		d.lt = nil
	}
	if d.ltMem != 0 {
		keep(cu.MemFree(d.ltMem))
		d.ltMem = 0
	}
	if d.blas != nil {
		keep(d.blas.Destroy())
	}
	if d.blasWS != 0 {
		keep(cu.MemFree(d.blasWS))
		d.blasWS = 0
	}
	if d.host != nil {
		keep(cu.MemFreeHost(d.host))
	}
	if d.stream != 0 {
		keep(d.stream.Destroy())
	}
	keep(d.dev.PrimaryCtxRelease())
	d.closed = true
	return first
}

// enter locks the device and binds its context to the calling thread.
func (d *Device) enter() (func(), error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("cuda: %s is closed", d.name)
	}
	unbind, err := d.ctx.Bind()
	if err != nil {
		unbind()
		d.mu.Unlock()
		return nil, err
	}
	return func() { unbind(); d.mu.Unlock() }, nil
}

// Do runs fn with the device locked and its context current on the
// calling thread, for packages that launch their own kernels on the
// Device's stream. fn must not call other Device methods (the lock is
// not reentrant); use the *Locked helpers it receives instead.
func (d *Device) Do(fn func(l *Locked) error) error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return fn(&Locked{d: d})
}

// Name returns "cuda:N".
func (d *Device) Name() string { return d.name }

// Ordinal returns the device number.
func (d *Device) Ordinal() int { return d.ordinal }

// ComputeCapability returns (major, minor).
func (d *Device) ComputeCapability() (int, int) { return d.cc[0], d.cc[1] }

// Multiprocessors returns the number of SMs.
func (d *Device) Multiprocessors() int { return d.sms }

// Precision is what Gemm rounds its inputs to (Options.Precision).
func (d *Device) Precision() backend.Precision { return d.prec }

// StreamPriority returns the stream's scheduling priority: 0 by default,
// negative (higher) with Options.HighPriority where the driver has
// priorities.
func (d *Device) StreamPriority() int { return d.priority }

// Kernels says how the back end's kernels were compiled or loaded.
func (d *Device) Kernels() KernelInfo { return d.kinfo }

// Stats returns the allocator's counters.
func (d *Device) Stats() AllocStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.alloc.stats
}

// ResetPeak restarts the allocator's high-water mark (Stats().PeakBytes)
// from the bytes in use and cached now, so a benchmark can measure one
// run after others on the same device (call ReleaseCache first to leave
// the earlier runs' cache out).
func (d *Device) ResetPeak() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.alloc.stats.PeakBytes = d.alloc.stats.InUseBytes + d.alloc.stats.CachedBytes
}

// ReleaseCache returns all cached device memory to the driver.
func (d *Device) ReleaseCache() error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return d.alloc.release()
}

// MemInfo returns the memory an allocation can still obtain, the
// driver's free memory plus the blocks the caching allocator holds
// (released to the driver when an allocation falls short), and the
// device's total memory.
func (d *Device) MemInfo() (free, total uint64, err error) {
	leave, err := d.enter()
	if err != nil {
		return 0, 0, err
	}
	defer leave()
	if free, total, err = cu.MemGetInfo(); err != nil {
		return 0, 0, err
	}
	return min(free+uint64(max(d.alloc.stats.CachedBytes, 0)), total), total, nil
}

// Synchronize waits for all queued work and reports index errors found on
// the device since the last synchronization.
func (d *Device) Synchronize() error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return d.syncLocked()
}

func (d *Device) syncLocked() error {
	if err := d.stream.Synchronize(); err != nil {
		return err
	}
	return d.checks.flush(d)
}

// Module is a loaded set of kernels.
type Module struct {
	m   cu.Module
	fns map[string]cu.Function
}

// Func returns the kernel named name.
func (m *Module) Func(name string) (cu.Function, error) {
	f, ok := m.fns[name]
	if !ok {
		return 0, fmt.Errorf("cuda: kernel %q not in module", name)
	}
	return f, nil
}

// LoadModule compiles src (CUDA C with extern "C" kernels; prepend
// CommonSource() for the shared definitions) for this device, through the
// on-disk kernel cache, and loads it. Loading the same name twice returns
// the first module.
func (d *Device) LoadModule(name, src string) (*Module, error) {
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	m, _, err := d.loadModuleLocked(name, src)
	return m, err
}

// nvrtcOptions are passed to every compilation.
var nvrtcOptions = []string{"--std=c++17"}

func (d *Device) loadModuleLocked(name, src string) (*Module, KernelInfo, error) {
	if m, ok := d.mods[name]; ok {
		return m, KernelInfo{}, nil
	}
	sm := d.cc[0]*10 + d.cc[1]
	kind, arch, err := nvrtc.Target(sm)
	if err != nil {
		return nil, KernelInfo{}, err
	}
	major, minor := nvrtc.Version()
	key := nvrtc.Key{Name: name, Source: src, Options: nvrtcOptions, Kind: kind, Arch: arch,
		NVRTC: fmt.Sprintf("%d.%d", major, minor), Driver: cu.DriverVersion()}
	info := KernelInfo{Kind: kind.String(), Arch: arch}
	var cache *nvrtc.Cache
	if dir, err := nvrtc.DefaultCacheDir(); err == nil {
		cache = &nvrtc.Cache{Dir: dir}
		info.CacheDir = dir
	}
	img, hit, err := cache.Build(key, func() ([]byte, error) {
		return nvrtc.Compile(src, name+".cu", kind, arch, nvrtcOptions...)
	})
	if err != nil {
		return nil, info, err
	}
	info.CacheHit = hit
	mod, err := cu.LoadModule(img)
	if err != nil && kind == nvrtc.CUBIN {
		// A cubin the driver refuses (e.g. a newer NVRTC than the
		// driver): fall back to PTX, which the driver JIT-compiles.
		ptxKey := key
		ptxKey.Kind = nvrtc.PTX
		img, hit, err2 := cache.Build(ptxKey, func() ([]byte, error) {
			return nvrtc.Compile(src, name+".cu", nvrtc.PTX, arch, nvrtcOptions...)
		})
		if err2 != nil {
			return nil, info, fmt.Errorf("%w (and PTX fallback: %v)", err, err2)
		}
		if mod, err2 = cu.LoadModule(img); err2 != nil {
			return nil, info, fmt.Errorf("%w (and PTX fallback: %v)", err, err2)
		}
		info.Kind, info.CacheHit, err = "ptx", hit, nil
	}
	if err != nil {
		return nil, info, err
	}
	m := &Module{m: mod, fns: map[string]cu.Function{}}
	if d.prof.fnNames == nil {
		d.prof.fnNames = map[cu.Function]string{}
	}
	for _, fn := range kernelNames(src) {
		f, err := mod.Function(fn)
		if err != nil {
			mod.Unload()
			return nil, info, err
		}
		m.fns[fn] = f
		d.prof.fnNames[f] = fn
	}
	d.mods[name] = m
	return m, info, nil
}

// kernelNames lists the extern "C" __global__ functions defined in src
// (with or without a __launch_bounds__ qualifier).
func kernelNames(src string) []string {
	var names []string
	const marker = `extern "C" __global__ void `
	for {
		i := strings.Index(src, marker)
		if i < 0 {
			return names
		}
		src = src[i+len(marker):]
		// Skip a __launch_bounds__(...) qualifier before the name.
		if rest, ok := strings.CutPrefix(src, "__launch_bounds__("); ok {
			k := strings.IndexByte(rest, ')')
			if k < 0 {
				return names
			}
			src = rest[k+1:]
		}
		j := strings.IndexByte(src, '(')
		if j < 0 {
			return names
		}
		names = append(names, strings.TrimSpace(src[:j]))
	}
}

// GemmImpl names the dense product in use (shown by `strata info`):
// "cublasLt pinned fp32" with pinned algorithms (EnvPinned), "cublas
// fp32" without.
func (d *Device) GemmImpl() string {
	if d.lt != nil {
		return "cublasLt pinned " + d.prec.String()
	}
	return "cublas " + d.prec.String()
}

// EnvPinned set to 0 (or false, off) turns the pinned cuBLASLt products
// off: Gemm then calls cublasSgemm and cublasGemmEx, which choose their
// kernels per shape (see the package doc, # Pinned GEMM algorithms).
const EnvPinned = "STRATA_CUBLAS_PINNED"

func pinnedOn() bool {
	v := strings.TrimSpace(os.Getenv(EnvPinned))
	if v == "" {
		return true
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return !strings.EqualFold(v, "off")
}

// initPinned sets up the pinned cuBLASLt products, where libcublasLt
// loads, the handle has its own workspace (which the products share) and
// EnvPinned does not turn them off.
func (d *Device) initPinned() error {
	if d.blasWS == 0 || !pinnedOn() || cublas.LoadLt() != nil {
		return nil
	}
	var err error
	if d.ltMem, err = cu.MemAlloc(cublas.PinnedScratchBytes); err != nil {
		return err
	}
	// Warm launches compute on it; zeros keep NaNs out of them.
	if err = cu.MemsetD8Async(d.ltMem, 0, cublas.PinnedScratchBytes, d.stream); err != nil {
		return err
	}
	if d.lt, err = cublas.NewPinned(uintptr(d.ltMem), cublas.PinnedScratchBytes); err != nil {
		return err
	}
	if on, _ := strconv.ParseBool(os.Getenv(EnvFamilyLog)); on {
		ord := d.ordinal
		d.lt.OnFamily = func(k cublas.Key, warming bool) {
			fmt.Fprintf(os.Stderr, "cuda:%d: product family %s (warming %t)\n", ord, k, warming)
		}
	}
	return nil
}

// EnvFamilyLog set to 1 logs each pinned product family to standard
// error as it is warmed: which products a warm-up missed.
const EnvFamilyLog = "STRATA_CUBLAS_FAMILY_LOG"

// PinnedStats counts the pinned cuBLASLt products (package
// internal/cublas): families warmed, keys, warm launches, fallbacks.
type PinnedStats = cublas.PinnedStats

// WarmProducts implements backend.ProductFamilies: while on, every
// product warms the family of its key (cublas.Pinned.SetWarming).
func (d *Device) WarmProducts(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lt != nil {
		d.lt.SetWarming(on)
	}
}

// ProductFamilies implements backend.ProductFamilies from GemmStats.
func (d *Device) ProductFamilies() (families, fallbacks int, ok bool) {
	s, ok := d.GemmStats()
	return s.Families, s.Fallbacks, ok
}

// GemmStats returns the counters of the pinned products; ok is false when
// Gemm does not use them (no cuBLASLt, or EnvPinned turns them off).
func (d *Device) GemmStats() (s PinnedStats, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lt == nil {
		return s, false
	}
	return d.lt.Stats(), true
}
