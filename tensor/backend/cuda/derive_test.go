package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// randomBlock returns a rows x cols CSR with some rows empty, some with
// their diagonal entry and some repeated columns.
func randomBlock(r *rand.Rand, rows, cols, maxDeg int) ([]int64, []int32) {
	indptr := []int64{0}
	var indices []int32
	for i := 0; i < rows; i++ {
		k := r.IntN(maxDeg + 1)
		for j := 0; j < k; j++ {
			c := int32(r.IntN(cols))
			if r.IntN(10) == 0 {
				c = int32(i)
			}
			indices = append(indices, c)
		}
		indptr = append(indptr, int64(len(indices)))
	}
	return indptr, indices
}

// TestAddSelfLoopsAndGCNNorm compares the device derivations with a host
// reference, exactly.
func TestAddSelfLoopsAndGCNNorm(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, sz := range [][3]int{{0, 0, 0}, {1, 1, 0}, {5, 9, 3}, {3000, 70000, 15}} {
		rows, cols := sz[0], sz[1]
		ip, ix := randomBlock(r, rows, cols, sz[2])
		a, err := d.NewSparse(rows, cols, ip, ix)
		must(t, err)
		l, err := d.AddSelfLoops(a)
		must(t, err)
		// Host reference.
		wip, wix := []int64{0}, []int32{}
		for i := 0; i < rows; i++ {
			row := ix[ip[i]:ip[i+1]]
			wix = append(wix, row...)
			has := false
			for _, j := range row {
				has = has || int(j) == i
			}
			if !has {
				wix = append(wix, int32(i))
			}
			wip = append(wip, int64(len(wix)))
		}
		ls := l.(*Sparse)
		if ls.NNZ() != len(wix) || ls.NumRows() != rows || ls.NumCols() != cols {
			t.Fatalf("%v: self-loop matrix %dx%d with %d entries, want %d", sz, ls.NumRows(), ls.NumCols(), ls.NNZ(), len(wix))
		}
		gip := download[int64](t, d, ls.Indptr())
		gix := download[int32](t, d, ls.Indices())
		for i := range wip {
			if gip[i] != wip[i] {
				t.Fatalf("%v: indptr[%d] = %d, want %d", sz, i, gip[i], wip[i])
			}
		}
		for i := range wix {
			if gix[i] != wix[i] {
				t.Fatalf("%v: indices[%d] = %d, want %d", sz, i, gix[i], wix[i])
			}
		}
		outdeg := make([]float64, cols)
		for _, j := range wix {
			outdeg[j]++
		}
		w, err := d.Alloc(backend.Float32, len(wix))
		must(t, err)
		must(t, d.GCNNorm(w, l))
		got := download[float32](t, d, w)
		for i := 0; i < rows; i++ {
			in := math.Max(float64(wip[i+1]-wip[i]), 1)
			for e := wip[i]; e < wip[i+1]; e++ {
				want := float32(1 / math.Sqrt(in*math.Max(outdeg[wix[e]], 1)))
				if got[e] != want {
					t.Fatalf("%v: gcn weight of edge %d = %v, want %v", sz, e, got[e], want)
				}
			}
		}
		d.Free(w)
		d.FreeSparse(l)
		d.FreeSparse(a)
	}
	// More rows than columns has no diagonal for every row.
	a, err := d.NewSparse(3, 2, []int64{0, 0, 0, 0}, nil)
	must(t, err)
	if _, err := d.AddSelfLoops(a); err == nil {
		t.Fatal("AddSelfLoops of a 3x2 matrix accepted")
	}
	d.FreeSparse(a)
}

// appendRows appends rows of the given lengths, random columns below
// cols, to the CSR (ip, ix).
func appendRows(r *rand.Rand, ip []int64, ix []int32, cols int, degs ...int) ([]int64, []int32) {
	for _, deg := range degs {
		for range deg {
			ix = append(ix, int32(r.IntN(cols)))
		}
		ip = append(ip, int64(len(ix)))
	}
	return ip, ix
}

// TestSpMMOneHeadMatchesGeneric runs the one-head SpMM kernels (16-byte
// and 4-byte loads, every columns-per-lane variant, several passes for
// wide rows, rows longer than one 32-edge chunk, misaligned matrices) and
// the generic spmm kernel on the same inputs and requires identical bits:
// both sum each element's edges in order with fused multiply-adds.
func TestSpMMOneHeadMatchesGeneric(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(9, 10))
	rows, cols := 3000, 7000
	ip, ix := randomBlock(r, rows, cols, 13)
	// A few long rows: several 32-edge chunks and partial unroll groups.
	ip, ix = appendRows(r, ip, ix, cols, 33, 64, 65, 100, 517)
	rows = len(ip) - 1
	a, err := d.NewSparse(rows, cols, ip, ix)
	must(t, err)
	defer d.FreeSparse(a)
	// The same rows but the last, sorted by length: uniform, so the
	// several-rows-per-warp kernels run (3004 rows: the last block is
	// partly past the end).
	order := make([]int, rows-1)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return int((ip[y+1] - ip[y]) - (ip[x+1] - ip[x])) })
	up, ux := []int64{0}, []int32(nil)
	for _, i := range order {
		ux = append(ux, ix[ip[i]:ip[i+1]]...)
		up = append(up, int64(len(ux)))
	}
	u, err := d.NewSparse(len(up)-1, cols, up, ux)
	must(t, err)
	defer d.FreeSparse(u)
	if a.(*Sparse).uniform || !u.(*Sparse).uniform {
		t.Fatalf("uniform: random rows %v, sorted rows %v", a.(*Sparse).uniform, u.(*Sparse).uniform)
	}
	for _, m := range []backend.Sparse{a, u} {
		spmmMatchesGeneric(t, d, r, m)
	}
}

// spmmMatchesGeneric compares SpMM on a with the generic kernel for many
// widths, with and without weights, transposed or not, aligned or not.
func spmmMatchesGeneric(t *testing.T, d *Device, r *rand.Rand, a backend.Sparse) {
	s := a.(*Sparse)
	rows, cols := s.rows, s.cols
	for _, width := range []int{1, 3, 4, 16, 32, 47, 48, 64, 100, 128, 129, 256, 300, 516, 1030} {
		for _, weighted := range []bool{false, true} {
			for _, tr := range []bool{false, true} {
				for _, shift := range []int{0, 1} { // 1: x and out not 16-byte aligned
					name := fmt.Sprintf("uniform %v width %d weighted %v transposed %v shift %d", s.uniform, width, weighted, tr, shift)
					xr, or := cols, rows
					if tr {
						xr, or = rows, cols
					}
					xv := make([]float32, xr*width+shift)
					for i := range xv {
						xv[i] = float32(r.NormFloat64())
					}
					xb := upload(t, d, backend.Float32, xv)
					x := xb.View(shift, xr*width)
					var w *Buffer
					var wb backend.Buffer
					if weighted {
						wv := make([]float32, s.nnz)
						for i := range wv {
							wv[i] = float32(r.Float64())
						}
						w = upload(t, d, backend.Float32, wv)
						wb = w
					}
					ob1, _ := d.Alloc(backend.Float32, or*width+shift)
					o2, _ := d.Alloc(backend.Float32, or*width)
					o1 := ob1.(*Buffer).View(shift, or*width)
					must(t, d.SpMM(o1, a, tr, x, wb, 1, width))
					must(t, d.run(func() error {
						v, err := d.viewLocked(s, tr)
						if err != nil {
							return err
						}
						return d.launchWarps("spmm", int64(v.rows), uint64(o2.(*Buffer).ptr), uint64(v.ptr), uint64(v.col), uint64(v.eid), uint64(w.Ptr()),
							uint64(x.ptr), cu.I64(int64(v.rows)), cu.I64(int64(width)), cu.I64(1))
					}))
					g1, g2 := download[float32](t, d, o1), download[float32](t, d, o2)
					for i := range g1 {
						if math.Float32bits(g1[i]) != math.Float32bits(g2[i]) {
							t.Fatalf("%s: element %d: one-head kernel %v, generic %v", name, i, g1[i], g2[i])
						}
					}
					d.Free(ob1)
					d.Free(o2)
					d.Free(xb)
					d.Free(w)
				}
			}
		}
	}
}

// TestSpMM1Kernel checks the kernel choice by width and row shape, and
// uniformRows and shortRows.
func TestSpMM1Kernel(t *testing.T) {
	for _, c := range []struct {
		width          int
		vec            bool
		uniform, short bool
		want           string
	}{{100, true, false, true, "spmm1_v2s"}, {128, true, true, true, "spmm1_v2s"}, {132, true, false, true, "spmm1_v2"},
		{47, false, false, true, "spmm1_s6g"}, {4, true, false, false, "spmm1_v1"}, {100, true, false, false, "spmm1_v1"}, {100, true, true, false, "spmm1_v2g"}, {128, true, true, false, "spmm1_v2g"},
		{132, true, true, false, "spmm1_v2"}, {256, true, false, false, "spmm1_v2"}, {260, true, false, false, "spmm1_v4"}, {1024, true, true, false, "spmm1_v4"},
		{1, false, false, false, "spmm1_s4g"}, {32, false, true, false, "spmm1_s4g"}, {47, false, false, false, "spmm1_s6g"}, {49, false, false, false, "spmm1_s2"},
		{100, false, true, false, "spmm1_s4"}, {129, false, false, false, "spmm1_s8"}, {1030, false, false, false, "spmm1_s8"}} {
		if got := spmm1Kernel(c.width, c.vec, c.uniform, c.short).name; got != c.want {
			t.Errorf("width %d vec %v uniform %v short %v: %s, want %s", c.width, c.vec, c.uniform, c.short, got, c.want)
		}
	}
	for _, c := range []struct {
		indptr []int64
		want   bool
	}{{[]int64{0}, false}, {[]int64{0, 5}, false}, {[]int64{0, 5, 10, 14, 18}, true}, {[]int64{0, 1, 9}, false},
		{[]int64{0, 10, 20, 21}, true}} {
		if got := uniformRows(c.indptr); got != c.want {
			t.Errorf("uniformRows(%v) = %v", c.indptr, got)
		}
	}
}

// TestProfile checks that profiling names and counts the queued ops.
func TestProfile(t *testing.T) {
	d := gpu(t)
	must(t, d.StartProfile())
	x, _ := d.Alloc(backend.Float32, 1<<20)
	must(t, d.Axpby(x, 2, x, 1, x))
	must(t, d.Axpby(x, 2, x, 1, x))
	must(t, d.Gemm(false, false, 16, 16, 16, 1, x.(*Buffer).View(0, 256), x.(*Buffer).View(256, 256), 0, x.(*Buffer).View(512, 256)))
	prof, err := d.StopProfile()
	must(t, err)
	d.Free(x)
	calls := map[string]int64{}
	for _, p := range prof {
		calls[p.Name] = p.Calls
		if p.Ms < 0 || math.IsNaN(p.Ms) {
			t.Fatalf("%s: %v ms", p.Name, p.Ms)
		}
	}
	if calls["axpby_f32"] != 2 || calls["sgemm NN m2^4 n16 k2^4"] != 1 || calls["memset"] != 1 {
		t.Fatalf("profile %+v", prof)
	}
	// Off again: nothing more is counted.
	must(t, d.StartProfile())
	p2, err := d.StopProfile()
	must(t, err)
	if len(p2) != 0 {
		t.Fatalf("empty profile %+v", p2)
	}
}

// TestSplitRows: rows longer than max are cut every max entries, the
// pieces in edge order; no cut, nils.
func TestSplitRows(t *testing.T) {
	if v, s := splitRows([]int64{0, 3, 3, 7}, 4); v != nil || s != nil {
		t.Fatalf("no row over 4: got %v, %v", v, s)
	}
	v, s := splitRows([]int64{0, 3, 3, 12, 13, 22}, 4)
	wantV := []int64{0, 3, 3, 7, 11, 12, 13, 17, 21, 22}
	wantS := []int64{0, 1, 2, 5, 6, 9}
	if !slices.Equal(v, wantV) || !slices.Equal(s, wantS) {
		t.Fatalf("got vptr %v sptr %v, want %v %v", v, s, wantV, wantS)
	}
}

// TestSpMMSplitRows: with rows cut (splitLen lowered), the one-head
// SpMM gives a row of one piece bit for bit as the generic kernel does
// and a cut row within float32 rounding of it, the same bits on every
// run and through AliasSparse; transposed products are not cut.
func TestSpMMSplitRows(t *testing.T) {
	d := gpu(t)
	defer func(n int64) { splitLen = n }(splitLen)
	splitLen = 64
	r := rand.New(rand.NewPCG(11, 12))
	rows, cols := 2000, 5000
	ip, ix := randomBlock(r, rows, cols, 13)
	ip, ix = appendRows(r, ip, ix, cols, 65, 128, 129, 517, 5000)
	rows = len(ip) - 1
	a, err := d.NewSparse(rows, cols, ip, ix)
	must(t, err)
	defer d.FreeSparse(a)
	if a.(*Sparse).split == nil {
		t.Fatal("rows over splitLen, no split")
	}
	al, err := d.AliasSparse(a)
	must(t, err)
	defer d.FreeSparse(al)
	for _, width := range []int{1, 4, 47, 100, 128, 256, 300} {
		for _, weighted := range []bool{false, true} {
			name := fmt.Sprintf("width %d weighted %v", width, weighted)
			xv := make([]float32, cols*width)
			for i := range xv {
				xv[i] = float32(r.NormFloat64())
			}
			x := upload(t, d, backend.Float32, xv)
			var w *Buffer
			var wb backend.Buffer
			if weighted {
				wv := make([]float32, len(ix))
				for i := range wv {
					wv[i] = float32(r.Float64())
				}
				w = upload(t, d, backend.Float32, wv)
				wb = w
			}
			outs := make([]*Buffer, 3)
			for i := range outs {
				b, err := d.Alloc(backend.Float32, rows*width)
				must(t, err)
				outs[i] = b.(*Buffer)
			}
			must(t, d.SpMM(outs[0], a, false, x, wb, 1, width))
			must(t, d.SpMM(outs[1], al, false, x, wb, 1, width))
			s := a.(*Sparse)
			must(t, d.run(func() error {
				v, err := d.viewLocked(s, false)
				if err != nil {
					return err
				}
				return d.launchWarps("spmm", int64(v.rows), uint64(outs[2].ptr), uint64(v.ptr), uint64(v.col), uint64(v.eid), uint64(w.Ptr()),
					uint64(x.ptr), cu.I64(int64(v.rows)), cu.I64(int64(width)), cu.I64(1))
			}))
			g0, g1, ref := download[float32](t, d, outs[0]), download[float32](t, d, outs[1]), download[float32](t, d, outs[2])
			for i := range ref {
				row := i / width
				if math.Float32bits(g0[i]) != math.Float32bits(g1[i]) {
					t.Fatalf("%s: element %d: %v, through the alias %v", name, i, g0[i], g1[i])
				}
				if ip[row+1]-ip[row] <= splitLen {
					if math.Float32bits(g0[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%s: element %d (row %d, whole): %v, generic %v", name, i, row, g0[i], ref[i])
					}
					continue
				}
				scale := 0.0 // weights are in [0, 1)
				for p := ip[row]; p < ip[row+1]; p++ {
					scale += math.Abs(float64(xv[int(ix[p])*width+i%width]))
				}
				// Both sums round at most once an edge: n*2^-24 of the
				// sum of the terms' sizes each.
				n := float64(ip[row+1] - ip[row])
				if diff := math.Abs(float64(g0[i] - ref[i])); diff > 2*n*0x1p-24*scale+1e-6 {
					t.Fatalf("%s: element %d (row %d, cut): %v, generic %v", name, i, row, g0[i], ref[i])
				}
			}
			for _, b := range outs {
				d.Free(b)
			}
			d.Free(x)
			d.Free(w)
		}
	}
}
