package cuda

import (
	"sort"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/nvrtc"
)

// TestKernelsCompile compiles the back end's CUDA C with NVRTC when the
// library can be found (no GPU is needed), so syntax errors show up on
// machines without a GPU too. Skipped without libnvrtc.
func TestKernelsCompile(t *testing.T) {
	if err := nvrtc.Load(); err != nil {
		t.Skipf("no libnvrtc (set STRATA_CUDA_PATH to compile kernels here): %v", err)
	}
	kind, arch, err := nvrtc.Target(90)
	if err != nil {
		t.Fatal(err)
	}
	img, err := nvrtc.Compile(backendSource(), "backend.cu", kind, arch, nvrtcOptions...)
	if err != nil {
		t.Fatal(err)
	}
	ptx, err := nvrtc.Compile(backendSource(), "backend.cu", nvrtc.PTX, arch, nvrtcOptions...)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kernelNames(backendSource()) {
		if !strings.Contains(string(ptx), ".entry "+k+"(") {
			t.Errorf("kernel %s missing from PTX", k)
		}
	}
	t.Logf("%s for sm_%d: %d bytes, %d kernels", kind, arch, len(img), len(kernelNames(backendSource())))
}

func TestKernelNamesUnique(t *testing.T) {
	names := kernelNames(backendSource())
	if len(names) < 30 {
		t.Fatalf("found %d kernels: %v", len(names), names)
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Fatalf("kernel %s defined twice", names[i])
		}
	}
}

func TestKernelNamesLaunchBounds(t *testing.T) {
	src := `extern "C" __global__ void a(int x) {}
extern "C" __global__ void __launch_bounds__(256, 4) b(int x) {}
extern "C" __global__ void c (int x) {}`
	if got := kernelNames(src); len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("kernelNames = %q", got)
	}
}

// TestAllocatorBestFit: a large request reuses the smallest cached
// block at most a quarter larger (without a driver call: the test
// runs without a GPU), small ones only their own class, and the
// counters follow.
func TestAllocatorBestFit(t *testing.T) {
	const g = 1 << 30
	a := &allocator{}
	a.put(1, classSize(g+600<<20))           // 1.59 GiB
	a.put(2, classSize(g+200<<20))           // 1.20 GiB
	a.put(3, classSize(2*g))                 // 2 GiB
	a.put(4, classSize(100<<10))             // small
	a.stats.InUseBytes = a.stats.CachedBytes // as if they had been in use
	p, size, err := a.get(g + 100<<20)       // 1.10 GiB: 1.20 fits, 1.59 too, the smaller wins
	if err != nil || p != 2 || size != classSize(g+200<<20) {
		t.Fatalf("get(1.10 GiB) = %d, %d, %v; want block 2 of 1.20 GiB", p, size, err)
	}
	if p, size, err = a.get(g + 500<<20); err != nil || p != 1 || size != classSize(g+600<<20) {
		t.Fatalf("get(1.49 GiB) = %d, %d, %v; want block 1 of 1.59 GiB", p, size, err)
	}
	if fit := a.bestFit(classSize(g + 700<<20)); fit != 2*g {
		t.Errorf("bestFit(1.68 GiB) = %d with only 2 GiB cached, want 2 GiB (within a quarter above)", fit)
	}
	if fit := a.bestFit(classSize(g + 500<<20)); fit != 0 {
		t.Errorf("bestFit(1.49 GiB) = %d with 2 GiB cached, want none (over a quarter above)", fit)
	}
	if fit := a.bestFit(classSize(80 << 10)); fit != 0 {
		t.Errorf("bestFit(80 KiB) = %d; small blocks only take their class", fit)
	}
	if a.stats.Hits != 2 || a.stats.CachedBytes != int64(2*g+classSize(100<<10)) {
		t.Errorf("stats %+v after two hits", a.stats)
	}
}

func TestClassSize(t *testing.T) {
	cases := map[uint64]uint64{1: 512, 512: 512, 513: 1024, 4096: 4096, 4097: 5120, 5121: 6144, 7169: 8192, 64 << 20: 64 << 20, 64<<20 + 1: 66 << 20, 1 << 30: 1 << 30, 1<<30 + 1: 1<<30 + 2<<20, 80<<30 - 1: 80 << 30}
	for n, want := range cases {
		if got := classSize(n); got != want {
			t.Errorf("classSize(%d) = %d, want %d", n, got, want)
		}
	}
	for n := uint64(1); n < 1<<36; n = n*3/2 + 7 {
		c := classSize(n)
		if c < n || c%512 != 0 || (n > 4096 && float64(c) > 1.25*float64(n)+512) || (n > largeBlock && c-n >= largeStep) {
			t.Fatalf("classSize(%d) = %d", n, c)
		}
	}
}
