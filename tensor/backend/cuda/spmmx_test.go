package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dataset"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/nvrtc"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/tensor/backend"
)

// spmmxSource is the back end's kernels plus the SpMM variants of
// BenchmarkSpMMVariants: instances of kernels/spmm.cu's spmm1g (G lanes
// per row, 32/G rows per warp; NV columns, float or float4, per lane; U
// edges in flight; PF: the next chunk's indices loaded ahead).
func spmmxSource(vs []*spmmxVariant) string {
	var src strings.Builder
	src.WriteString(backendSource())
	for _, v := range vs {
		src.WriteString(v.source())
	}
	return src.String()
}

// spmmxVariant is one instantiation of spmm1g.
type spmmxVariant struct {
	vec            bool // float4
	bf16           bool // spmm1gb: 4 (vec: 8) bfloat16 values a vector, float32 sums
	g, nv, u       int
	pf             bool
	minBlocks      int // __launch_bounds__(256, minBlocks); 0: none
	width          int // the width it is for
	name, typeName string
}

func (v *spmmxVariant) init() {
	v.typeName = "float"
	if v.vec {
		v.typeName = "float4"
	}
	pf := 0
	if v.pf {
		pf = 1
	}
	kind := map[bool]string{false: "s", true: "v"}[v.vec]
	if v.bf16 {
		v.typeName = "uint2"
		if v.vec {
			v.typeName = "uint4"
		}
		kind = map[bool]string{false: "b4", true: "b8"}[v.vec]
	}
	v.name = fmt.Sprintf("x_w%d_%s_g%d_nv%d_u%d_pf%d_lb%d", v.width, kind, v.g, v.nv, v.u, pf, v.minBlocks)
}

// lanes is the values a vector of the variant holds.
func (v *spmmxVariant) lanes() int {
	switch {
	case v.bf16 && v.vec:
		return 8
	case v.bf16 || v.vec:
		return 4
	}
	return 1
}

func (v *spmmxVariant) source() string {
	lb := ""
	if v.minBlocks > 0 {
		lb = fmt.Sprintf("__launch_bounds__(256, %d) ", v.minBlocks)
	}
	call := fmt.Sprintf("spmm1g<%s, %d, %d, %d, %v>", v.typeName, v.g, v.nv, v.u, v.pf)
	if v.bf16 {
		call = fmt.Sprintf("spmm1gb<%s, %s, %d, %d, %d, %v>", v.typeName, map[bool]string{false: "float4", true: "f8"}[v.vec], v.g, v.nv, v.u, v.pf)
	}
	return fmt.Sprintf(`extern "C" __global__ void %s%s(%s* out, const i64* ptr, const int* col, const float* w, const %s* x, i64 rows, i64 wd) {
  %s(out, ptr, col, nullptr, w, x, rows, wd, wd, nullptr);
}
`, lb, v.name, v.typeName, v.typeName, call)
}

func spmmxVariants() []*spmmxVariant {
	vs := []*spmmxVariant{
		{width: 256, vec: true, g: 32, nv: 2, u: 4},
		{width: 256, vec: true, g: 32, nv: 2, u: 4, pf: true},
		{width: 256, vec: true, g: 32, nv: 2, u: 8, pf: true},
		{width: 256, vec: true, g: 32, nv: 2, u: 2, pf: true},
		{width: 256, vec: true, g: 16, nv: 4, u: 4, pf: true},
		{width: 256, vec: true, g: 32, nv: 2, u: 4, pf: true, minBlocks: 4},
		{width: 100, vec: true, g: 32, nv: 1, u: 8},
		{width: 100, vec: true, g: 32, nv: 1, u: 8, pf: true},
		{width: 100, vec: true, g: 32, nv: 1, u: 16, pf: true},
		{width: 100, vec: true, g: 16, nv: 2, u: 8, pf: true},
		{width: 100, vec: true, g: 8, nv: 4, u: 4, pf: true},
		{width: 100, vec: true, g: 8, nv: 4, u: 8, pf: true},
		{width: 100, vec: true, g: 32, nv: 1, u: 8, pf: true, minBlocks: 4},
		{width: 47, g: 32, nv: 2, u: 8},
		{width: 47, g: 32, nv: 2, u: 8, pf: true},
		{width: 47, g: 32, nv: 2, u: 16, pf: true},
		{width: 47, g: 16, nv: 3, u: 8, pf: true},
		{width: 47, g: 16, nv: 3, u: 16, pf: true},
		{width: 47, g: 8, nv: 6, u: 4, pf: true},
		{width: 47, g: 8, nv: 6, u: 8, pf: true},
		{width: 47, g: 32, nv: 2, u: 8, pf: true, minBlocks: 4},
	}
	for _, v := range vs {
		v.init()
	}
	return vs
}

// BenchmarkSpMMVariants times the SpMM kernels of spmm.cu and the
// variants above on the graph of $STRATA_BENCH_DATASET (widths 47, 100
// and 256, mean weights), in the dataset's node order, by descending
// degree, and in the order of the partition file $STRATA_BENCH_ORDER
// when set, checking every variant's bits against the back end's SpMM.
// Run with -benchtime 1x -test.v.
func BenchmarkSpMMVariants(b *testing.B) {
	dir := os.Getenv("STRATA_BENCH_DATASET")
	if dir == "" {
		b.Skip("set STRATA_BENCH_DATASET")
	}
	d := gpu(b)
	ds, err := dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
	if err != nil {
		b.Fatal(err)
	}
	vs := spmmxVariants()
	t0 := time.Now()
	mod, err := d.LoadModule("spmmx", spmmxSource(vs))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("compiled %d variants in %.1fs", len(vs), time.Since(t0).Seconds())

	orders := []struct {
		name string
		ds   *dataset.Dataset
	}{{"natural", ds}}
	n := int(ds.NumNodes())
	g := ds.Graph
	byDeg := make([]int32, n)
	for i := range byDeg {
		byDeg[i] = int32(i)
	}
	slices.SortStableFunc(byDeg, func(a, c int32) int {
		return int((g.Indptr[c+1] - g.Indptr[c]) - (g.Indptr[a+1] - g.Indptr[a]))
	})
	oldToNew := make([]int32, n)
	for nw, old := range byDeg {
		oldToNew[old] = int32(nw)
	}
	if dd, err := partition.PermuteDataset(ds, oldToNew); err == nil {
		orders = append(orders, struct {
			name string
			ds   *dataset.Dataset
		}{"degree", dd})
	} else {
		b.Fatal(err)
	}
	if path := os.Getenv("STRATA_BENCH_ORDER"); path != "" {
		saved, err := partition.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		pd, err := partition.PermuteDataset(ds, saved.OldToNew)
		if err != nil {
			b.Fatal(err)
		}
		orders = append(orders, struct {
			name string
			ds   *dataset.Dataset
		}{fmt.Sprintf("partition k=%d", saved.Book.K()), pd})
	}

	r := rand.New(rand.NewPCG(1, 1))
	for _, o := range orders {
		g := o.ds.Graph
		nnz := len(g.Indices)
		a, err := d.NewSparse(n, n, g.Indptr, g.Indices)
		if err != nil {
			b.Fatal(err)
		}
		wv := make([]float32, nnz)
		for i := 0; i < n; i++ {
			deg := g.Indptr[i+1] - g.Indptr[i]
			for e := g.Indptr[i]; e < g.Indptr[i+1]; e++ {
				wv[e] = float32(1 / float64(deg))
			}
		}
		w := upload(b, d, backend.Float32, wv)
		s := a.(*Sparse)
		for _, width := range []int{47, 100, 256} {
			xv := make([]float32, n*width)
			for i := range xv {
				xv[i] = float32(r.NormFloat64())
			}
			x := upload(b, d, backend.Float32, xv)
			ref, _ := d.Alloc(backend.Float32, n*width)
			out, _ := d.Alloc(backend.Float32, n*width)
			gb := float64(nnz) * float64(width) * 4 / 1e9
			timeIt := func(fn func() error) float64 { return bestTime(b, d, 4, 1, fn) }
			sec := timeIt(func() error { return d.SpMM(ref, a, false, x, w, 1, width) })
			b.Logf("%-16s width %3d  %-34s %7.2f ms  %5.2f TB/s", o.name, width, "back end ("+spmm1Kernel(width, width%4 == 0, s.uniform, shortRows(s.rows, s.nnz)).name+")", 1e3*sec, gb/sec/1e3)
			want := download[float32](b, d, ref)
			for _, v := range vs {
				if v.width != width {
					continue
				}
				f, err := mod.Func(v.name)
				if err != nil {
					b.Fatal(err)
				}
				wd := int64(width)
				if v.vec {
					wd = int64(width / 4)
				}
				rowsPerBlock := int64(8 * (32 / v.g))
				blocks := (int64(n) + rowsPerBlock - 1) / rowsPerBlock
				sec := timeIt(func() error {
					return d.Do(func(l *Locked) error {
						return l.LaunchShape(f, cu.D1(int(blocks)), cu.D1(threads), 0, uint64(out.(*Buffer).ptr), uint64(s.ptr.ptr), uint64(s.col.ptr),
							uint64(w.ptr), uint64(x.ptr), cu.I64(int64(n)), cu.I64(wd))
					})
				})
				got := download[float32](b, d, out)
				same := "same bits"
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						same = fmt.Sprintf("DIFFERS at %d: %v vs %v", i, got[i], want[i])
						break
					}
				}
				b.Logf("%-16s width %3d  %-34s %7.2f ms  %5.2f TB/s  %s", o.name, width, v.name, 1e3*sec, gb/sec/1e3, same)
			}
			d.Free(x)
			d.Free(ref)
			d.Free(out)
		}
		d.FreeSparse(a)
		d.Free(w)
	}
}

// TestSpMMVariantsCompile compiles BenchmarkSpMMVariants' kernels with
// NVRTC when it can be found (no GPU needed).
func TestSpMMVariantsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles 21 kernel variants: skipped with -short")
	}
	if err := nvrtc.Load(); err != nil {
		t.Skipf("no libnvrtc: %v", err)
	}
	kind, arch, err := nvrtc.Target(90)
	if err != nil {
		t.Fatal(err)
	}
	vs := spmmxVariants()
	src := spmmxSource(vs)
	if _, err := nvrtc.Compile(src, "spmmx.cu", kind, arch, nvrtcOptions...); err != nil {
		t.Fatal(err)
	}
	if n, base := len(kernelNames(src)), len(kernelNames(backendSource())); n != base+len(vs) {
		t.Fatalf("%d kernels found, want the back end's %d and %d variants", n, base, len(vs))
	}
}
