package feature

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// gpu returns GPU 0, skipping the test without one.
var gpu = gputest.One

func TestHotByInDegree(t *testing.T) {
	g := &graph.CSR{NumRows: 5, NumCols: 5, Indptr: []int64{0, 1, 4, 4, 7, 8}, Indices: []int32{0, 1, 2, 3, 0, 1, 2, 4}}
	got := HotByInDegree(g)
	want := []graph.NodeID{1, 3, 0, 4, 2} // degrees 1,3,0,3,1; ties by id
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("HotByInDegree = %v, want %v", got, want)
		}
	}
}

func TestKernelsCompile(t *testing.T) {
	gputest.CompileKernels(t, kernelSrc, "feature.cu")
}

// TestGatherSplits gathers random rows with the whole table cold, part
// hot and all hot, widths with and without the vector path, float32 and
// bfloat16 tables, and compares with the host table exactly (rounded to
// bfloat16 for those: the budget then holds twice the hot rows).
func TestGatherSplits(t *testing.T) {
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprintf("bf16=%v", bf16), func(t *testing.T) { testGatherSplits(t, bf16) })
	}
}

func testGatherSplits(t *testing.T, bf16 bool) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(1, 2))
	vb, partHot := 4, 1000
	if bf16 {
		vb, partHot = 2, 2000
	}
	for _, cols := range []int{1, 3, 100, 128} {
		rows := 5000
		feats := make([]float32, rows*cols)
		for i := range feats {
			feats[i] = float32(r.NormFloat64())
		}
		want := feats
		if bf16 {
			want = append([]float32(nil), feats...)
			backend.BF16.RoundSlice(want)
		}
		hot := make([]graph.NodeID, rows)
		for i, v := range r.Perm(rows) {
			hot[i] = graph.NodeID(v)
		}
		for _, budget := range []int64{0, int64(4*rows + 4*cols*1000), 1 << 40} {
			// The hot rows go up in chunks of 64 KiB, each counted.
			var uploaded int64
			old := uploadChunk
			uploadChunk = 64 << 10
			s, err := New(d, feats, rows, cols, Options{BudgetBytes: budget, Hot: hot, BFloat16: bf16, OnUpload: func(n int64) { uploaded += n }})
			uploadChunk = old
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("cols=%d budget=%d hot=%d", cols, budget, s.HotRows())
			if s.BFloat16() != bf16 || s.HotRows() > 0 && s.DeviceBytes() != int64(4*rows+vb*cols*s.HotRows()) {
				t.Fatalf("%s: BFloat16 %v, %d device bytes", name, s.BFloat16(), s.DeviceBytes())
			}
			if uploaded != int64(vb)*int64(s.HotRows())*int64(cols) {
				t.Fatalf("%s: %d bytes reported uploaded, want %d", name, uploaded, vb*s.HotRows()*cols)
			}
			// Every row hot: no pinned copy of the table.
			if (s.host == nil) != (s.HotRows() == rows) {
				t.Fatalf("%s: pinned host table %v with %d of %d rows hot", name, s.host != nil, s.HotRows(), rows)
			}
			// The table as it is (node order, float32) only when every
			// row is hot and not bfloat16: the whole table, node v at row v
			// whatever Hot's order.
			if tab, ok := s.NodeOrderTable(); ok != (s.HotRows() == rows && !bf16) {
				t.Fatalf("%s: NodeOrderTable ok %v", name, ok)
			} else if ok {
				all := make([]float32, rows*cols)
				if tab.DType() != backend.Float32 || d.Download(all, tab) != nil || !slices.Equal(all, feats) {
					t.Fatalf("%s: NodeOrderTable is not the table in node order", name)
				}
			}
			nodes := make([]int32, 7777)
			for i := range nodes {
				nodes[i] = int32(r.IntN(rows))
			}
			nb, _ := d.Alloc(backend.Int32, len(nodes))
			d.Upload(nb, nodes)
			out, _ := d.Alloc(backend.Float32, len(nodes)*cols)
			if err := s.Gather(out, nb); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(nodes)*cols)
			if err := d.Download(got, out); err != nil {
				t.Fatal(err)
			}
			for i, v := range nodes {
				for c := 0; c < cols; c++ {
					if got[i*cols+c] != want[int(v)*cols+c] {
						t.Fatalf("%s: row %d (node %d) col %d = %v, want %v", name, i, v, c, got[i*cols+c], want[int(v)*cols+c])
					}
				}
			}
			// GatherDropout: the same values times Dropout's mask, exactly.
			const p, seed = 0.4, 99
			if err := s.GatherDropout(out, nb, p, seed); err != nil {
				t.Fatal(err)
			}
			if err := d.Download(got, out); err != nil {
				t.Fatal(err)
			}
			keep := float32(1) / (1 - p)
			dropped := 0
			for i, v := range nodes {
				for c := 0; c < cols; c++ {
					k := i*cols + c
					w := want[int(v)*cols+c] * keep
					if rng.DropUniform(seed, uint64(k)) < p {
						w, dropped = want[int(v)*cols+c]*0, dropped+1
					}
					if got[k] != w {
						t.Fatalf("%s: GatherDropout row %d (node %d) col %d = %v, want %v", name, i, v, c, got[k], w)
					}
				}
			}
			if n := len(nodes) * cols; dropped < n/4 || dropped > n/2+n/10 {
				t.Fatalf("%s: GatherDropout dropped %d of %d values at p = %v", name, dropped, n, p)
			}
			if err := s.GatherDropout(out, nb, 1, seed); err == nil {
				t.Fatalf("%s: GatherDropout with p = 1: no error", name)
			}
			if budget == 0 && s.HotRows() != 0 || budget == 1<<40 && s.HotRows() != rows || budget > 0 && budget < 1<<40 && s.HotRows() != partHot {
				t.Fatalf("%s: unexpected hot rows", name)
			}
			// A bad node id is reported at the next Synchronize.
			bad, _ := d.Alloc(backend.Int32, 3)
			d.Upload(bad, []int32{0, int32(rows), 1})
			out3, _ := d.Alloc(backend.Float32, 3*cols)
			if err := s.Gather(out3, bad); err != nil {
				t.Fatal(err)
			}
			var ie *backend.IndexError
			if err := d.Synchronize(); !errors.As(err, &ie) || ie.Pos != 1 || ie.Value != int64(rows) {
				t.Fatalf("%s: bad node: %v", name, err)
			}
			for _, b := range []backend.Buffer{nb, out, bad, out3} {
				d.Free(b)
			}
			s.Close()
		}
	}
}

// TestGatherBF16AllHot: a bfloat16 table whose every row is hot goes to
// the device as it is, encoded chunk by chunk (chunks of 10 KiB here:
// many, the last one partial, none a whole number of 4-value groups), with
// no pinned host copy; a gather equals the CPU's widening of the CPU's
// encoding (backend.ToBF16 then FromBF16), whatever Hot's order.
func TestGatherBF16AllHot(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 3001, 37
	feats := make([]float32, rows*cols)
	for i := range feats {
		feats[i] = float32(r.NormFloat64() * 100)
	}
	enc := make([]uint16, len(feats))
	backend.ToBF16(enc, feats)
	want := make([]float32, len(feats))
	backend.FromBF16(want, enc)
	hot := make([]graph.NodeID, rows)
	for i, v := range r.Perm(rows) {
		hot[i] = graph.NodeID(v)
	}
	var uploaded int64
	var calls int
	old := uploadChunk
	uploadChunk = 10 << 10
	s, err := New(d, feats, rows, cols, Options{BudgetBytes: 4*rows + 2*rows*cols, Hot: hot, BFloat16: true,
		OnUpload: func(n int64) { uploaded += n; calls++ }})
	uploadChunk = old
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.HotRows() != rows || s.host != nil || !s.BFloat16() || s.DeviceBytes() != 4*rows+2*rows*cols {
		t.Fatalf("hot %d of %d, pinned copy %v, bf16 %v, %d device bytes", s.HotRows(), rows, s.host != nil, s.BFloat16(), s.DeviceBytes())
	}
	chunkRows := (10 << 10) / (2 * cols)
	if uploaded != 2*rows*cols || calls != (rows+chunkRows-1)/chunkRows {
		t.Fatalf("%d bytes uploaded in %d chunks, want %d in %d", uploaded, calls, 2*rows*cols, (rows+chunkRows-1)/chunkRows)
	}
	nodes := make([]int32, rows+500)
	for i := range nodes {
		nodes[i] = int32(i % rows) // every row, then some again
	}
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	nb, _ := d.Alloc(backend.Int32, len(nodes))
	defer d.Free(nb)
	if err := d.Upload(nb, nodes); err != nil {
		t.Fatal(err)
	}
	out, _ := d.Alloc(backend.Float32, len(nodes)*cols)
	defer d.Free(out)
	if err := s.Gather(out, nb); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(nodes)*cols)
	if err := d.Download(got, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range nodes {
		for c := range cols {
			if g, w := got[i*cols+c], want[int(v)*cols+c]; g != w {
				t.Fatalf("row %d (node %d) col %d = %v, want %v (bf16 of %v)", i, v, c, g, w, feats[int(v)*cols+c])
			}
		}
	}
}

// TestNewNeedsKernels: a back end that cannot run the gather kernels
// (the CPU's) is refused by New, naming what it lacks.
func TestNewNeedsKernels(t *testing.T) {
	c, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(c, make([]float32, 6), 2, 3, Options{})
	if err == nil || !strings.Contains(err.Error(), "cpu cannot gather") || !strings.Contains(err.Error(), "backend.Kernels") {
		t.Fatalf("New on the cpu back end: %v", err)
	}
	if _, err := New(nil, nil, 0, 1, Options{}); err == nil {
		t.Fatal("New on a nil device: no error")
	}
}

func TestBadOptions(t *testing.T) {
	d := gpu(t)
	if _, err := New(d, make([]float32, 10), 3, 3, Options{}); err == nil {
		t.Fatal("wrong table size accepted")
	}
	if _, err := New(d, make([]float32, 9), 3, 3, Options{BudgetBytes: 1 << 20, Hot: []graph.NodeID{0, 5}}); err == nil {
		t.Fatal("hot node out of range accepted")
	}
	if _, err := New(d, make([]float32, 9), 3, 3, Options{BudgetBytes: 1 << 20, Hot: []graph.NodeID{1, 1}}); err == nil {
		t.Fatal("repeated hot node accepted")
	}
}

// BenchmarkGather gathers 600k random rows of a 2.45M x 100 table
// (ogbn-products' shape) with everything hot, 20% hot by budget, and
// everything read from mapped host memory; reports TB/s of rows read
// plus written and GB/s read from host memory.
func BenchmarkGather(b *testing.B) {
	d := gpu(b)
	const rows, cols, n = 2_449_029, 100, 600_000
	feats := make([]float32, rows*cols)
	for i := range feats {
		feats[i] = float32(i % 1000)
	}
	r := rand.New(rand.NewPCG(3, 4))
	nodes := make([]int32, n)
	for i := range nodes {
		nodes[i] = int32(r.IntN(rows))
	}
	nb, _ := d.Alloc(backend.Int32, n)
	d.Upload(nb, nodes)
	out, _ := d.Alloc(backend.Float32, n*cols)
	defer d.Free(nb)
	defer d.Free(out)
	for _, tc := range []struct {
		name   string
		budget int64
		bf16   bool
	}{{"allhot", 1 << 40, false}, {"hot20pct", 4*rows + rows/5*cols*4, false}, {"allcold", 0, false},
		{"allhot-bf16", 1 << 40, true}, {"hot20pct-bf16", 4*rows + rows/5*cols*2, true}, {"allcold-bf16", 0, true}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(d, feats, rows, cols, Options{BudgetBytes: tc.budget, BFloat16: tc.bf16})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.Gather(out, nb)
			d.Synchronize()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Gather(out, nb); err != nil {
					b.Fatal(err)
				}
			}
			if err := d.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// TB/s counts the feature bytes read plus written (rows x
			// 100 x (4 or 2 read + 4 written)); GB/s-host only the bytes
			// read from pinned host memory over the bus (the cold rows).
			cold := 0
			for _, v := range nodes {
				if int(v) >= s.HotRows() {
					cold++
				}
			}
			vb := 4.0
			if tc.bf16 {
				vb = 2
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric((vb+4)*float64(n*cols)/sec/1e12, "TB/s")
			b.ReportMetric(vb*float64(cold*cols)/sec/1e9, "GB/s-host")
		})
	}
}

// TestGatherStagedExtra: a machine's shard (Offset) with rows of other
// machines kept in device memory (Options.Extra) and rows staged in
// mapped pinned memory: GatherStaged writes, per batch position, the
// shard's row (-1: device cache or pinned table), extra row j (-2-j) or
// staged row k (k >= 0), exactly as the host tables hold them (bfloat16
// rounded in a bfloat16 store, staged rows float32), with input dropout
// on every kind; an extra position past the extra rows is reported.
func TestGatherStagedExtra(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(5, 6))
	const rows, lo, nextra, nstaged, n = 600, 1000, 20, 5, 3000
	for _, bf16 := range []bool{false, true} {
		for _, cols := range []int{3, 128} {
			vb := 4
			if bf16 {
				vb = 2
			}
			feats := make([]float32, rows*cols)
			extraX := make([]float32, 50*cols)
			staged := make([]float32, nstaged*cols)
			for _, x := range [][]float32{feats, extraX, staged} {
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
			}
			wantF, wantE := feats, extraX
			if bf16 {
				wantF, wantE = slices.Clone(feats), slices.Clone(extraX)
				backend.BF16.RoundSlice(wantF)
				backend.BF16.RoundSlice(wantE)
			}
			extraRows := make([]int32, nextra)
			for i, v := range r.Perm(50)[:nextra] {
				extraRows[i] = int32(v)
			}
			hot := make([]graph.NodeID, rows)
			for i, v := range r.Perm(rows) {
				hot[i] = graph.NodeID(v)
			}
			for _, budget := range []int64{0, int64(4*rows + vb*cols*200), 1 << 40} {
				var uploaded int64
				s, err := New(d, feats, rows, cols, Options{BudgetBytes: budget, Hot: hot, BFloat16: bf16, Offset: lo,
					Extra: extraX, ExtraRows: extraRows, OnUpload: func(b int64) { uploaded += b }})
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("bf16=%v cols=%d budget=%d hot=%d", bf16, cols, budget, s.HotRows())
				own := s.HotRows() - nextra
				if wantOwn := map[int64]int{0: 0, int64(4*rows + vb*cols*200): 200, 1 << 40: rows}[budget]; own != wantOwn {
					t.Fatalf("%s: %d own rows hot, want %d", name, own, wantOwn)
				}
				slot := int64(0)
				if own > 0 {
					slot = 4 * rows
				}
				if s.DeviceBytes() != slot+int64(vb*cols*(own+nextra)) || uploaded != int64(vb*cols*(own+nextra)) {
					t.Fatalf("%s: %d device bytes, %d uploaded", name, s.DeviceBytes(), uploaded)
				}
				// The batch: node IDs and slot map, and what each position reads.
				nodes, pos := make([]int32, n), make([]int32, n)
				want := make([]float32, n*cols)
				for i := range nodes {
					switch k := r.IntN(3); k {
					case 0:
						v := r.IntN(rows)
						nodes[i], pos[i] = int32(lo+v), -1
						copy(want[i*cols:], wantF[v*cols:(v+1)*cols])
					case 1:
						j := r.IntN(nextra)
						nodes[i], pos[i] = int32(5000+j), int32(-2-j)
						e := int(extraRows[j])
						copy(want[i*cols:], wantE[e*cols:(e+1)*cols])
					default:
						j := r.IntN(nstaged)
						nodes[i], pos[i] = int32(7000+j), int32(j)
						copy(want[i*cols:], staged[j*cols:(j+1)*cols])
					}
				}
				off := (4*len(staged) + 15) &^ 15
				pin, err := d.AllocPinned(uint64(off+4*n), true)
				if err != nil {
					t.Fatal(err)
				}
				copy(pin.Float32s(), staged)
				copy(pin.Int32s()[off/4:], pos)
				base := pin.DeviceAddr()
				nb, _ := d.Alloc(backend.Int32, n)
				d.Upload(nb, nodes)
				out, _ := d.Alloc(backend.Float32, n*cols)
				got := make([]float32, n*cols)
				for _, p := range []float32{0, 0.4} {
					const seed = 31
					if err := s.GatherStaged(out, nb, base+backend.DevPtr(off), base, nstaged, p, seed); err != nil {
						t.Fatal(err)
					}
					if err := d.Download(got, out); err != nil {
						t.Fatal(err)
					}
					for k := range want {
						w := want[k]
						if p > 0 {
							w *= float32(1) / (1 - p)
							if rng.DropUniform(seed, uint64(k)) < p {
								w = want[k] * 0
							}
						}
						if got[k] != w {
							t.Fatalf("%s p=%v: row %d (node %d, slot %d) col %d = %v, want %v", name, p, k/cols, nodes[k/cols], pos[k/cols], k%cols, got[k], w)
						}
					}
				}
				// An extra position past the extra rows is a bad index.
				pin.Int32s()[off/4+7] = -2 - nextra
				if err := s.GatherStaged(out, nb, base+backend.DevPtr(off), base, nstaged, 0, 0); err != nil {
					t.Fatal(err)
				}
				var ie *backend.IndexError
				if err := d.Synchronize(); !errors.As(err, &ie) || ie.Pos != 7 {
					t.Fatalf("%s: extra position past the extra rows: %v", name, err)
				}
				d.Free(nb)
				d.Free(out)
				pin.Free()
				s.Close()
			}
		}
	}
	if _, err := New(d, make([]float32, 9), 3, 3, Options{Extra: make([]float32, 6), ExtraRows: []int32{2}}); err == nil {
		t.Fatal("extra row past Extra accepted")
	}
	if _, err := New(d, make([]float32, 9), 3, 3, Options{Extra: make([]float32, 5), ExtraRows: []int32{0}}); err == nil {
		t.Fatal("Extra of a partial row accepted")
	}
}

// TestGatherIntoBF16: a bfloat16 store gathers into a bfloat16 batch
// (trainers with bfloat16 activations) exactly what its float32 gather
// followed by Convert gives, with and without dropout, for rows cold,
// part hot and all hot, widths of the 8-value form (128) and of the
// one-value form (3, 100), into an aligned batch and an unaligned view;
// a float32 store refuses a bfloat16 batch.
func TestGatherIntoBF16(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, cols := range []int{3, 100, 128} {
		rows := 3000
		feats := make([]float32, rows*cols)
		for i := range feats {
			feats[i] = float32(r.NormFloat64())
		}
		hot := make([]graph.NodeID, rows)
		for i, v := range r.Perm(rows) {
			hot[i] = graph.NodeID(v)
		}
		nodes := make([]int32, 4001)
		for i := range nodes {
			nodes[i] = int32(r.IntN(rows))
		}
		nb, _ := d.Alloc(backend.Int32, len(nodes))
		d.Upload(nb, nodes)
		n := len(nodes) * cols
		for _, budget := range []int64{0, int64(4*rows + 2*cols*1000), 1 << 40} {
			s, err := New(d, feats, rows, cols, Options{BudgetBytes: budget, Hot: hot, BFloat16: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []float32{0, 0.4} {
				name := fmt.Sprintf("cols=%d hot=%d p=%v", cols, s.HotRows(), p)
				ref, _ := d.Alloc(backend.Float32, n)
				conv, _ := d.Alloc(backend.BFloat16, n)
				if err := s.GatherDropout(ref, nb, p, 7); err != nil {
					t.Fatal(err)
				}
				if err := d.Convert(conv, ref); err != nil {
					t.Fatal(err)
				}
				want := make([]uint16, n)
				if err := d.Download(want, conv); err != nil {
					t.Fatal(err)
				}
				whole, _ := d.Alloc(backend.BFloat16, n+1)
				unaligned, err := backend.View(whole, 1, n)
				if err != nil {
					t.Fatal(err)
				}
				aligned, _ := d.Alloc(backend.BFloat16, n)
				for _, out := range []backend.Buffer{aligned, unaligned} {
					if err := s.GatherDropout(out, nb, p, 7); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					got := make([]uint16, n)
					if err := d.Download(got, out); err != nil {
						t.Fatal(err)
					}
					for k := range want {
						if got[k] != want[k] {
							t.Fatalf("%s (aligned %v): value %d = %#04x, want %#04x", name, out == aligned, k, got[k], want[k])
						}
					}
				}
				for _, b := range []backend.Buffer{ref, conv, whole, aligned} {
					d.Free(b)
				}
			}
			s.Close()
		}
		f32, err := New(d, feats, rows, cols, Options{BudgetBytes: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := d.Alloc(backend.BFloat16, n)
		var se *backend.ShapeError
		if err := f32.Gather(out, nb); !errors.As(err, &se) {
			t.Fatalf("cols=%d: a float32 store gathered into bfloat16: %v", cols, err)
		}
		d.Free(out)
		f32.Close()
		d.Free(nb)
	}
}

// TestGatherNoHost: with Options.NoHost a store that caches some rows
// pins no table, gathers its hot rows as any store does, and reports a
// gather of another row as an index error (the row zeroed).
func TestGatherNoHost(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, bf16 := range []bool{false, true} {
		for _, cols := range []int{3, 128} {
			rows := 3000
			feats := make([]float32, rows*cols)
			for i := range feats {
				feats[i] = float32(r.NormFloat64())
			}
			want := append([]float32(nil), feats...)
			if bf16 {
				backend.BF16.RoundSlice(want)
			}
			perm := r.Perm(rows)
			hot := make([]graph.NodeID, rows/2)
			for i := range hot {
				hot[i] = graph.NodeID(perm[i])
			}
			vb := int64(4)
			if bf16 {
				vb = 2
			}
			name := fmt.Sprintf("bf16=%v cols=%d", bf16, cols)
			s, err := New(d, feats, rows, cols, Options{BudgetBytes: 4*int64(rows) + vb*int64(cols*len(hot)), Hot: hot, BFloat16: bf16, NoHost: true})
			if err != nil {
				t.Fatal(err)
			}
			if s.host != nil || s.HotRows() != len(hot) {
				t.Fatalf("%s: pinned table %v, %d hot rows, want none and %d", name, s.host != nil, s.HotRows(), len(hot))
			}
			nodes := make([]int32, 2000)
			for i := range nodes {
				nodes[i] = int32(hot[r.IntN(len(hot))])
			}
			nb, _ := d.Alloc(backend.Int32, len(nodes))
			d.Upload(nb, nodes)
			out, _ := d.Alloc(backend.Float32, len(nodes)*cols)
			got := make([]float32, len(nodes)*cols)
			if err := s.Gather(out, nb); err != nil {
				t.Fatal(err)
			}
			if err := d.Download(got, out); err != nil {
				t.Fatal(err)
			}
			for i, v := range nodes {
				if !slices.Equal(got[i*cols:(i+1)*cols], want[int(v)*cols:(int(v)+1)*cols]) {
					t.Fatalf("%s: row %d (node %d) differs", name, i, v)
				}
			}
			cold := int32(perm[rows-1]) // not hot
			bad, _ := d.Alloc(backend.Int32, 3)
			d.Upload(bad, []int32{int32(hot[0]), cold, int32(hot[1])})
			out3, _ := d.Alloc(backend.Float32, 3*cols)
			if err := s.Gather(out3, bad); err != nil {
				t.Fatal(err)
			}
			var ie *backend.IndexError
			if err := d.Synchronize(); !errors.As(err, &ie) || ie.Pos != 1 {
				t.Fatalf("%s: a row that is not hot: %v", name, err)
			}
			for _, b := range []backend.Buffer{nb, out, bad, out3} {
				d.Free(b)
			}
			s.Close()
		}
	}
}
