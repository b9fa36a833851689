package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// TestSpMMVec4MatchesScalar runs the 16-byte kernel and the scalar one on
// the same inputs and requires identical bits (both sum each element's
// edges in order).
func TestSpMMVec4MatchesScalar(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(9, 10))
	rows, cols := 4000, 9000
	ip, ix := randomBlock(r, rows, cols, 13)
	a, err := d.NewSparse(rows, cols, ip, ix)
	must(t, err)
	defer d.FreeSparse(a)
	s := a.(*Sparse)
	for _, width := range []int{4, 100, 256, 516} {
		for _, weighted := range []bool{false, true} {
			for _, tr := range []bool{false, true} {
				name := fmt.Sprintf("width %d weighted %v transposed %v", width, weighted, tr)
				xr, or := cols, rows
				if tr {
					xr, or = rows, cols
				}
				xv := make([]float32, xr*width)
				for i := range xv {
					xv[i] = float32(r.NormFloat64())
				}
				x := upload(t, d, backend.Float32, xv)
				var w *Buffer
				if weighted {
					wv := make([]float32, len(ix))
					for i := range wv {
						wv[i] = float32(r.Float64())
					}
					w = upload(t, d, backend.Float32, wv)
				}
				var wb backend.Buffer
				if w != nil {
					wb = w
				}
				o1, _ := d.Alloc(backend.Float32, or*width)
				o2, _ := d.Alloc(backend.Float32, or*width)
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
						t.Fatalf("%s: element %d: vec4 %v, scalar %v", name, i, g1[i], g2[i])
					}
				}
				d.Free(o1)
				d.Free(o2)
				d.Free(x)
				d.Free(w)
			}
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
	if calls["axpby_f32"] != 2 || calls["sgemm"] != 1 || calls["memset"] != 1 {
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
