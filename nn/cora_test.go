package nn_test

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// planetoid is a Planetoid dataset read from the shared gzip files (the
// dataset package's importer is not needed for this test).
type planetoid struct {
	n, dim, classes  int
	in               *graph.CSR
	feat             []float32 // row-normalized
	labels           []int32
	train, val, test []int32
}

func readGz(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	must(t, err)
	data, err := io.ReadAll(io.LimitReader(z, 1<<30))
	must(t, err)
	return data
}

func int32s(data []byte) []int32 {
	out := make([]int32, len(data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out
}

func loadPlanetoid(t testing.TB, name string) *planetoid {
	t.Helper()
	dir := testkit.Dataset(t, name)
	d := &planetoid{}
	d.labels = int32s(readGz(t, filepath.Join(dir, "labels.bin.gz")))
	d.n = len(d.labels)
	raw := readGz(t, filepath.Join(dir, "features.bin.gz"))
	d.feat = make([]float32, len(raw)/4)
	for i := range d.feat {
		d.feat[i] = float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	d.dim = len(d.feat) / d.n
	for r := 0; r < d.n; r++ { // row-normalize as the GCN/GAT pipelines do
		row := d.feat[r*d.dim : (r+1)*d.dim]
		var s float32
		for _, v := range row {
			s += v
		}
		if s != 0 {
			for i := range row {
				row[i] /= s
			}
		}
	}
	for _, l := range d.labels {
		d.classes = max(d.classes, int(l)+1)
	}
	edges := int32s(readGz(t, filepath.Join(dir, "edges.bin.gz")))
	rows := make([][]int32, d.n)
	for e := 0; e+1 < len(edges); e += 2 {
		src, dst := edges[e], edges[e+1]
		rows[dst] = append(rows[dst], src)
	}
	d.in = &graph.CSR{NumRows: int64(d.n), NumCols: int64(d.n), Indptr: []int64{0}}
	for _, r := range rows {
		sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
		d.in.Indices = append(d.in.Indices, r...)
		d.in.Indptr = append(d.in.Indptr, int64(len(d.in.Indices)))
	}
	d.train = int32s(readGz(t, filepath.Join(dir, "train.idx.gz")))
	d.val = int32s(readGz(t, filepath.Join(dir, "val.idx.gz")))
	d.test = int32s(readGz(t, filepath.Join(dir, "test.idx.gz")))
	return d
}

// coraRun holds a full-batch training setup on a Planetoid dataset.
type coraRun struct {
	b      backend.Backend
	d      *planetoid
	blk    *nn.Block
	m      nn.Model
	opt    optim.Optimizer
	xs     *autograd.SparseInput
	xbuf   backend.Buffer
	rows   backend.Buffer
	labels backend.Buffer
	sparse bool
	tape   *autograd.Tape
}

func newCoraRun(t testing.TB, b backend.Backend, d *planetoid, kind string, sparse bool, seed uint64) *coraRun {
	t.Helper()
	r := &coraRun{b: b, d: d, sparse: sparse, tape: autograd.NewTape(b)}
	var err error
	r.blk, err = nn.UploadGraph(b, d.in)
	must(t, err)
	cfg, err := nn.DefaultConfig(kind, d.dim, d.classes)
	must(t, err)
	cfg.Seed = seed
	r.m, err = nn.New(b, cfg)
	must(t, err)
	lr, wd, err := nn.DefaultOptim(kind)
	must(t, err)
	r.opt = optim.NewAdam(b, r.m.Params(), lr, 0.9, 0.999, 1e-8, wd)
	if sparse {
		r.xs, err = autograd.SparseFromDense(b, d.n, d.dim, d.feat)
		must(t, err)
	} else {
		r.xbuf, err = b.Alloc(backend.Float32, len(d.feat))
		must(t, err)
		must(t, b.Upload(r.xbuf, d.feat))
	}
	r.rows = int32Buf(t, b, d.train)
	lab := make([]int32, len(d.train))
	for i, v := range d.train {
		lab[i] = d.labels[v]
	}
	r.labels = int32Buf(t, b, lab)
	return r
}

func (r *coraRun) free() {
	r.tape.Release()
	r.opt.Free()
	nn.FreeParams(r.b, r.m.Params())
	r.blk.Free()
	r.xs.Free(r.b)
	r.b.Free(r.xbuf)
	r.b.Free(r.rows)
	r.b.Free(r.labels)
}

func (r *coraRun) forward(train bool, seed uint64) (*autograd.Var, error) {
	blocks := make([]*nn.Block, r.m.Config().Layers)
	for i := range blocks {
		blocks[i] = r.blk
	}
	if r.sparse {
		return r.m.ForwardSparse(r.tape, r.xs, blocks, train, seed)
	}
	x, err := r.tape.Const(r.xbuf, r.d.n, r.d.dim)
	if err != nil {
		return nil, err
	}
	return r.m.Forward(r.tape, x, blocks, train, seed)
}

func (r *coraRun) step(t testing.TB, seed uint64) float64 {
	out, err := r.forward(true, seed)
	must(t, err)
	lp, err := r.tape.LogSoftmax(out)
	must(t, err)
	loss, l, err := r.tape.NLLLoss(lp, r.rows, r.labels)
	must(t, err)
	must(t, r.opt.ZeroGrad())
	must(t, r.tape.Backward(loss))
	must(t, r.opt.Step())
	r.tape.Release()
	return l
}

func (r *coraRun) accuracy(t testing.TB, nodes []int32) float64 {
	out, err := r.forward(false, 0)
	must(t, err)
	logits := download(t, r.b, out.Value)
	r.tape.Release()
	c := r.d.classes
	correct := 0
	for _, v := range nodes {
		best := 0
		for k := 1; k < c; k++ {
			if logits[int(v)*c+k] > logits[int(v)*c+best] {
				best = k
			}
		}
		if int32(best) == r.d.labels[v] {
			correct++
		}
	}
	return float64(correct) / float64(len(nodes))
}

// coraAccuracy trains kind full-batch for 200 epochs on the sparse input
// path, on a CPU back end at precision p (bf16: features rounded to
// bfloat16, as the trainers store them), and returns the test accuracy
// of the epoch with the best validation accuracy. Results are kept for
// the test binary (the runs are deterministic).
func coraAccuracy(t *testing.T, d *planetoid, kind string, p backend.Precision) float64 {
	t.Helper()
	key := kind + " " + p.String()
	if a, ok := coraAccuracies[key]; ok {
		return a
	}
	b, err := cpu.New(cpu.Options{Precision: p})
	must(t, err)
	if p == backend.BF16 {
		rd := *d
		rd.feat = append([]float32(nil), d.feat...)
		backend.BF16.RoundSlice(rd.feat)
		d = &rd
	}
	r := newCoraRun(t, b, d, kind, true, 1)
	defer r.free()
	start := time.Now()
	bestVal, test := -1.0, 0.0
	var first, last float64
	for epoch := 0; epoch < 200; epoch++ {
		l := r.step(t, rng.Derive(1, uint64(epoch)))
		if epoch == 0 {
			first = l
		}
		last = l
		if v := r.accuracy(t, d.val); v > bestVal {
			bestVal, test = v, r.accuracy(t, d.test)
		}
	}
	t.Logf("%s cora at %s: loss %.3f -> %.3f, best val %.3f, test %.3f, %v for 200 epochs (+eval)",
		kind, p, first, last, bestVal, test, time.Since(start).Round(time.Millisecond))
	coraAccuracies[key] = test
	return test
}

var coraAccuracies = map[string]float64{}

// TestCoraAccuracy trains GCN (200 epochs) and GAT (200 epochs) full-batch
// with the papers' settings on the sparse input path and checks the test
// accuracy of the epoch with the best validation accuracy against the
// published numbers minus a margin (GCN 81.5, GAT 83.0).
func TestCoraAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on Cora; skipped in -short")
	}
	d := loadPlanetoid(t, "cora")
	for _, c := range []struct {
		kind string
		min  float64
	}{{nn.KindGCN, 0.78}, {nn.KindGAT, 0.79}} {
		if test := coraAccuracy(t, d, c.kind, backend.FP32); test < c.min {
			t.Errorf("%s: cora test accuracy %.3f, want >= %.2f", c.kind, test, c.min)
		}
	}
}

// TestCoraAccuracyPrecision: the same runs at tf32 and bf16 (the CPU back
// end's emulation) reach test accuracies no more than half a point below
// fp32's.
func TestCoraAccuracyPrecision(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on Cora; skipped in -short")
	}
	d := loadPlanetoid(t, "cora")
	for _, kind := range []string{nn.KindGCN, nn.KindGAT} {
		ref := coraAccuracy(t, d, kind, backend.FP32)
		for _, p := range []backend.Precision{backend.TF32, backend.BF16} {
			if got := coraAccuracy(t, d, kind, p); got < ref-0.005 {
				t.Errorf("%s at %s: cora test accuracy %.3f, more than half a point below fp32's %.3f", kind, p, got, ref)
			}
		}
	}
}

// BenchmarkCoraStep times one full-batch training step (forward, backward,
// Adam) on Cora, dense and sparse feature input.
func BenchmarkCoraStep(bm *testing.B) {
	d := loadPlanetoid(bm, "cora")
	b := newCPU(bm)
	for _, kind := range []string{nn.KindGCN, nn.KindSAGE, nn.KindGAT} {
		for _, sparse := range []bool{false, true} {
			name := kind + "/dense"
			if sparse {
				name = kind + "/sparse"
			}
			bm.Run(name, func(bm *testing.B) {
				r := newCoraRun(bm, b, d, kind, sparse, 1)
				defer r.free()
				r.step(bm, 0) // fill the block caches
				bm.ResetTimer()
				for i := 0; i < bm.N; i++ {
					r.step(bm, uint64(i))
				}
			})
		}
	}
}

func float32frombits(u uint32) float32 { return math.Float32frombits(u) }
