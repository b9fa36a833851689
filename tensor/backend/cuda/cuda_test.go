package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/autograd/gradcheck"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backendtest"
)

var (
	devOnce sync.Once
	dev     *Device
	devErr  error
)

// gpu opens cuda:0 once per test binary, or skips with a one-line reason.
func gpu(t testing.TB) *Device {
	t.Helper()
	devOnce.Do(func() { dev, devErr = Open(0, Options{}) })
	if devErr != nil {
		msg := devErr.Error()
		if i := strings.IndexByte(msg, ';'); i > 0 && !testing.Verbose() {
			msg = msg[:i]
		}
		t.Skipf("no usable GPU: %s", msg)
	}
	return dev
}

func TestConformance(t *testing.T) {
	d := gpu(t)
	t.Logf("%s: sm_%d%d, %d SMs, kernels %+v", d.Name(), d.cc[0], d.cc[1], d.sms, d.Kernels())
	backendtest.Run(t, d)
}

// TestConformancePrecision runs the suite on handles of cuda:0 opened at
// TF32 and BF16 (TestConformance is FP32), each at its precision's
// tolerances; -v logs how far Gemm is from the CPU back end's emulation
// (operands rounded to nearest even).
func TestConformancePrecision(t *testing.T) {
	gpu(t)
	for _, p := range []backend.Precision{backend.TF32, backend.BF16} {
		t.Run(p.String(), func(t *testing.T) {
			d, err := Open(0, Options{Precision: p})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Precision() != p || !strings.HasPrefix(d.GemmImpl(), "cublas") || !strings.HasSuffix(d.GemmImpl(), " "+p.String()) {
				t.Fatalf("opened at %v: Precision %v, GemmImpl %q", p, d.Precision(), d.GemmImpl())
			}
			s, err := d.Sibling(backend.SiblingOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Precision() != p {
				t.Errorf("sibling precision %v, want %v", s.Precision(), p)
			}
			s.Close()
			backendtest.Run(t, d)
		})
	}
}

func TestGradCheck(t *testing.T) {
	gradcheck.Run(t, gpu(t))
}

func upload[T float32 | int32 | int64](t testing.TB, d *Device, dt backend.DType, v []T) *Buffer {
	t.Helper()
	b, err := d.Alloc(dt, len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, v); err != nil {
		t.Fatal(err)
	}
	return b.(*Buffer)
}

func download[T float32 | int32 | int64](t testing.TB, d *Device, b backend.Buffer) []T {
	t.Helper()
	v := make([]T, b.Len())
	if err := d.Download(v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDropoutMatchesCPU requires the GPU mask to equal the CPU's bit for
// bit (same counter-based generator).
func TestDropoutMatchesCPU(t *testing.T) {
	d := gpu(t)
	c, _ := cpu.New(cpu.Options{})
	const n = 1<<20 + 3
	x := make([]float32, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, p := range []float32{0.1, 0.5, 0.9} {
		seed := rng.Derive(99, uint64(p*10))
		gx := upload(t, d, backend.Float32, x)
		gd, _ := d.Alloc(backend.Float32, n)
		gm, _ := d.Alloc(backend.Float32, n)
		if err := d.Dropout(gd, gm, gx, p, seed); err != nil {
			t.Fatal(err)
		}
		cx, cd, cm := cpu.WrapF32(x), cpu.WrapF32(make([]float32, n)), cpu.WrapF32(make([]float32, n))
		if err := c.Dropout(cd, cm, cx, p, seed); err != nil {
			t.Fatal(err)
		}
		gmv, gdv := download[float32](t, d, gm), download[float32](t, d, gd)
		kept := 0
		for i := range gmv {
			if math.Float32bits(gmv[i]) != math.Float32bits(cpu.F32(cm)[i]) || math.Float32bits(gdv[i]) != math.Float32bits(cpu.F32(cd)[i]) {
				t.Fatalf("p=%v element %d: gpu mask %v out %v, cpu mask %v out %v", p, i, gmv[i], gdv[i], cpu.F32(cm)[i], cpu.F32(cd)[i])
			}
			if gmv[i] != 0 {
				kept++
			}
		}
		if frac := float64(kept) / n; math.Abs(frac-float64(1-p)) > 0.005 {
			t.Fatalf("p=%v kept %.4f", p, frac)
		}
		d.Free(gx)
		d.Free(gd)
		d.Free(gm)
	}
}

// TestScanAndBucketLarge exercises multi-level scans and many radix
// passes against host references.
func TestScanAndBucketLarge(t *testing.T) {
	d := gpu(t)
	for _, n := range []int{0, 1, 1023, 1024, 1025, 3_000_001} {
		r := rand.New(rand.NewPCG(uint64(n), 7))
		in := make([]int64, n)
		for i := range in {
			in[i] = int64(r.IntN(1000)) - 100
		}
		bi := upload(t, d, backend.Int64, in)
		bo, _ := d.Alloc(backend.Int64, n)
		err := d.Do(func(l *Locked) error { return l.ScanI64(bo.(*Buffer), bi, n) })
		if err != nil {
			t.Fatal(err)
		}
		got := download[int64](t, d, bo)
		var run int64
		for i := range in {
			if got[i] != run {
				t.Fatalf("scan n=%d: out[%d] = %d, want %d", n, i, got[i], run)
			}
			run += in[i]
		}
		d.Free(bi)
		d.Free(bo)
	}
	for _, tc := range []struct{ n, nkeys int }{{0, 5}, {10, 1}, {5000, 3}, {4097, 256}, {100_000, 300}, {70_000, 1 << 24}, {200_000, 2_449_029}, {1_500_000, 1000}} {
		r := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.nkeys)))
		keys := make([]int32, tc.n)
		for i := range keys {
			keys[i] = int32(r.IntN(tc.nkeys))
		}
		bk := upload(t, d, backend.Int32, keys)
		var ptr, order []int64
		var ord32 []int32
		err := d.Do(func(l *Locked) error {
			p, o, err := l.Bucket(bk, tc.nkeys, 0)
			if err != nil {
				return err
			}
			ptr = make([]int64, p.n)
			ord32 = make([]int32, o.n)
			if tc.n > 0 {
				cu.MemcpyDtoHAsync(unsafePtr(ptr), p.ptr, uint64(8*p.n), l.Stream())
				cu.MemcpyDtoHAsync(unsafePtr(ord32), o.ptr, uint64(4*o.n), l.Stream())
			} else if p.n > 0 {
				cu.MemcpyDtoHAsync(unsafePtr(ptr), p.ptr, uint64(8*p.n), l.Stream())
			}
			err = l.Sync()
			l.Free(p)
			l.Free(o)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Host reference: stable counting sort.
		want := make([]int64, tc.nkeys+2)
		for _, k := range keys {
			want[k+1]++
		}
		for k := 0; k <= tc.nkeys; k++ {
			want[k+1] += want[k]
		}
		for k := range want {
			if ptr[k] != want[k] {
				t.Fatalf("bucket n=%d: ptr[%d] = %d, want %d", tc.n, k, ptr[k], want[k])
			}
		}
		order = make([]int64, tc.n)
		next := append([]int64(nil), want[:tc.nkeys]...)
		for i, k := range keys {
			order[next[k]] = int64(i)
			next[k]++
		}
		for i := range order {
			if int64(ord32[i]) != order[i] {
				t.Fatalf("bucket n=%d nkeys=%d: order[%d] = %d, want %d", tc.n, tc.nkeys, i, ord32[i], order[i])
			}
		}
		d.Free(bk)
	}
}

// TestAgainstCPULarge compares sparse and dense ops with the CPU back end
// on sizes that fill many blocks.
func TestAgainstCPULarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large comparison skipped in -short mode")
	}
	d := gpu(t)
	c, _ := cpu.New(cpu.Options{})
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols, deg := 20_000, 50_000, 12
	indptr := make([]int64, rows+1)
	var indices []int32
	for i := 0; i < rows; i++ {
		k := r.IntN(2 * deg)
		for j := 0; j < k; j++ {
			indices = append(indices, int32(r.IntN(cols)))
		}
		indptr[i+1] = int64(len(indices))
	}
	ga, err := d.NewSparse(rows, cols, indptr, indices)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeSparse(ga)
	ca, _ := c.NewSparse(rows, cols, indptr, indices)
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, tc := range []struct {
		transpose    bool
		heads, width int
	}{{false, 1, 256}, {true, 1, 256}, {false, 4, 300}, {true, 2, 6}} {
		xr := cols
		if tc.transpose {
			xr = rows
		}
		or := rows + cols - xr
		x := randv(xr * tc.width)
		w := randv(len(indices) * tc.heads)
		gx, gw := upload(t, d, backend.Float32, x), upload(t, d, backend.Float32, w)
		gout, _ := d.Alloc(backend.Float32, or*tc.width)
		cout := cpu.WrapF32(make([]float32, or*tc.width))
		if err := d.SpMM(gout, ga, tc.transpose, gx, gw, tc.heads, tc.width); err != nil {
			t.Fatal(err)
		}
		if err := c.SpMM(cout, ca, tc.transpose, cpu.WrapF32(x), cpu.WrapF32(w), tc.heads, tc.width); err != nil {
			t.Fatal(err)
		}
		relClose(t, fmt.Sprintf("SpMM %+v", tc), download[float32](t, d, gout), cpu.F32(cout), 1e-5)
		d.Free(gx)
		d.Free(gw)
		d.Free(gout)
	}
	// Gemm 1024x256 * 256x256 in full FP32.
	m, n, k := 1024, 256, 256
	a, b := randv(m*k), randv(k*n)
	ga2, gb2 := upload(t, d, backend.Float32, a), upload(t, d, backend.Float32, b)
	gc, _ := d.Alloc(backend.Float32, m*n)
	cc := cpu.WrapF32(make([]float32, m*n))
	if err := d.Gemm(false, true, m, n, k, 1, ga2, gb2, 0, gc); err != nil {
		t.Fatal(err)
	}
	c.Gemm(false, true, m, n, k, 1, cpu.WrapF32(a), cpu.WrapF32(b), 0, cc)
	relClose(t, "Gemm", download[float32](t, d, gc), cpu.F32(cc), 1e-5)
}

func relClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	var num, den float64
	for i := range got {
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: NaN at %d", what, i)
		}
		dd := float64(got[i]) - float64(want[i])
		num += dd * dd
		den += float64(want[i]) * float64(want[i])
	}
	if e := math.Sqrt(num / max(den, 1e-300)); e > tol {
		t.Fatalf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// TestAllocatorSteadyState runs a training-like sequence of ops twice and
// requires the second pass to make no cuMemAlloc or cuMemFree call.
func TestAllocatorSteadyState(t *testing.T) {
	d := gpu(t)
	indptr := []int64{0, 2, 3, 3, 6}
	indices := []int32{0, 4, 1, 2, 3, 4}
	step := func() {
		a, err := d.NewSparse(4, 5, indptr, indices)
		if err != nil {
			t.Fatal(err)
		}
		x := upload(t, d, backend.Float32, make([]float32, 5*64))
		w := upload(t, d, backend.Float32, make([]float32, 64*64))
		h, _ := d.Alloc(backend.Float32, 4*64)
		o, _ := d.Alloc(backend.Float32, 4*64)
		g, _ := d.Alloc(backend.Float32, 5*64)
		must(t, d.SpMM(h, a, false, x, nil, 1, 64))
		must(t, d.Gemm(false, false, 4, 64, 64, 1, h, w, 0, o))
		must(t, d.SpMM(g, a, true, h, nil, 1, 64))
		idx := upload(t, d, backend.Int32, []int32{3, 1, 1, 0})
		must(t, d.ScatterAddRows(g, o, idx, 5, 64))
		if _, err := d.Sum(g); err != nil {
			t.Fatal(err)
		}
		for _, b := range []backend.Buffer{x, w, h, o, g, idx} {
			d.Free(b)
		}
		d.FreeSparse(a)
	}
	step()
	before := d.Stats()
	for i := 0; i < 5; i++ {
		step()
	}
	after := d.Stats()
	if after.Mallocs != before.Mallocs || after.Frees != before.Frees {
		t.Fatalf("steady state made driver calls: before %+v after %+v", before, after)
	}
	if after.Hits <= before.Hits {
		t.Fatalf("no cache hits: %+v", after)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOOMError asks for more memory than the device has free and expects
// an *OOMError that names the size and the knobs, with the device still
// usable afterwards.
func TestOOMError(t *testing.T) {
	d := gpu(t)
	free, total, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	big, err := d.Alloc(backend.Float32, int(free/4*9/10))
	if err != nil {
		t.Fatalf("allocating 90%% of free memory: %v", err)
	}
	_, err = d.Alloc(backend.Float32, int(free/4*9/10))
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("second large Alloc: %v, want *OOMError", err)
	}
	if !strings.Contains(err.Error(), "batch size") || oom.Total != total || oom.Requested < free/10*9 {
		t.Fatalf("OOM error lacks detail: %v (%+v)", err, oom)
	}
	d.Free(big)
	if err := d.ReleaseCache(); err != nil {
		t.Fatal(err)
	}
	small, err := d.Alloc(backend.Float32, 1024)
	if err != nil {
		t.Fatalf("after OOM: %v", err)
	}
	d.Free(small)
}

// TestOpenWithoutLibraries runs without a GPU (in CI): in a child process
// whose library search finds nothing, Open must fail with one clear error
// naming libcuda, the folders searched and STRATA_CUDA_PATH.
func TestOpenWithoutLibraries(t *testing.T) {
	if os.Getenv("STRATA_TEST_CHILD") == "open" {
		_, err := backend.Open("cuda:0")
		fmt.Printf("ERR=%v\n", err)
		return
	}
	empty := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenWithoutLibraries$")
	// LD_LIBRARY_PATH cleared and the loader bypassed: only the empty
	// folder and the fixed folders are searched.
	cmd.Env = append(os.Environ(), "STRATA_TEST_CHILD=open", "STRATA_CUDA_PATH="+empty, "LD_LIBRARY_PATH=")
	out, _ := cmd.CombinedOutput()
	s := string(out)
	if cu.Load() == nil {
		t.Skipf("a CUDA driver is installed here; the child found it: %s", firstLine(s))
	}
	for _, want := range []string{"ERR=cuda: cannot open cuda:0", "libcuda", empty, "STRATA_CUDA_PATH"} {
		if !strings.Contains(s, want) {
			t.Errorf("child output lacks %q:\n%s", want, s)
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// TestUploadRing uploads many buffers of mixed sizes (wrapping the pinned
// staging ring many times, with the host reusing its source slice at
// once) and checks every one.
func TestUploadRing(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(11, 12))
	src := make([]float32, stageMax/4+100)
	var bufs []backend.Buffer
	var want [][]float32
	for i := 0; i < 150; i++ {
		n := 1 + r.IntN(100_000)
		switch i % 5 {
		case 0:
			n = 1 + r.IntN(len(src))
		case 1:
			n = 1 + r.IntN(64)
		}
		for j := 0; j < n; j++ {
			src[j] = float32(r.NormFloat64())
		}
		b, err := d.Alloc(backend.Float32, n)
		if err != nil {
			t.Fatal(err)
		}
		// A kernel between uploads keeps the stream busy.
		must(t, d.Upload(b, src[:n]))
		must(t, d.Axpby(b, 1, b, 0, b))
		bufs = append(bufs, b)
		want = append(want, append([]float32(nil), src[:n]...))
		for j := 0; j < n; j++ {
			src[j] = float32(math.NaN()) // the upload must not see this
		}
	}
	for i, b := range bufs {
		got := download[float32](t, d, b)
		for j := range got {
			if got[j] != want[i][j] {
				t.Fatalf("upload %d element %d = %v, want %v", i, j, got[j], want[i][j])
			}
		}
		d.Free(b)
	}
}
