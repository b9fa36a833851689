package fullgraph

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// deviceComms returns p device communicators staging CPU back-end buffers
// through an in-process group: the device path of the engine, without a
// GPU.
func deviceComms(t *testing.T, b backend.Backend, p int) []comm.Comm {
	t.Helper()
	hs, err := inproc.New(p, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcs := make([]comm.Comm, p)
	for r, h := range hs {
		dcs[r] = staged.Open(h, b, comm.Options{})
	}
	t.Cleanup(func() {
		for _, c := range dcs {
			c.Close()
		}
	})
	return dcs
}

// TestDeviceCommEqualsHost: the device-communicator path (blocks gathered
// and broadcast into the N-row matrices, contributions exchanged
// all-to-all and weight gradients all-reduced between device buffers)
// gives the same run, bit for bit, as staging through host memory: exact,
// with skip-broadcast (some blocks sent, some not) and with gradient
// skipping (packed sends).
func TestDeviceCommEqualsHost(t *testing.T) {
	ds := cora(t)
	epochs := 6
	if testing.Short() {
		epochs = 2
	}
	for _, tc := range []struct {
		model string
		p     int
		stale func(*Staleness)
	}{
		{SAGE, 2, nil},
		{GCN, 3, func(*Staleness) {}},
		{SAGE, 3, func(s *Staleness) { s.Gradients = true }},
		{GAT, 2, nil},
		{GAT, 3, func(s *Staleness) { s.Gradients = true }},
	} {
		cfg := Defaults(tc.model)
		cfg.Epochs, cfg.EvalEvery = epochs, 2
		if tc.stale != nil {
			cfg.Staleness = DefaultStaleness()
			tc.stale(&cfg.Staleness)
		}
		want := run(t, ds, cfg, tc.p)
		bs := devices(t, tc.p)
		got, err := Run(context.Background(), ds, cfg, Options{Backends: bs, DeviceComms: deviceComms(t, bs[0], tc.p)})
		if err != nil {
			t.Fatal(err)
		}
		for e := range want.Epochs {
			x, y := want.Epochs[e], got.Epochs[e]
			x.Seconds, y.Seconds, x.EvalSeconds, y.EvalSeconds = 0, 0, 0, 0
			if !reflect.DeepEqual(x, y) || want.EpochComm[e] != got.EpochComm[e] {
				t.Fatalf("%s P=%d epoch %d:\nhost   %+v %+v\ndevice %+v %+v", tc.model, tc.p, e+1, x, want.EpochComm[e], y, got.EpochComm[e])
			}
		}
		if !reflect.DeepEqual(want.Comm, got.Comm) {
			t.Fatalf("%s P=%d: comm stats differ:\nhost   %+v\ndevice %+v", tc.model, tc.p, want.Comm, got.Comm)
		}
		if tc.stale != nil && got.Comm.BroadcastsSkipped == 0 {
			t.Errorf("%s P=%d: no broadcast skipped, the partial-send path is untested", tc.model, tc.p)
		}
	}
}

// fusedCPU adds the optional fused methods to the CPU back end, computed
// on the host in the order the composed versions use: the engine's
// fused path, checked without a GPU.
type fusedCPU struct{ backend.Backend }

func (f fusedCPU) BiasAct(dst, a, b, bias backend.Buffer, rows, cols int, relu bool) error {
	d, av, bv, biasv := cpu.F32(dst), cpu.F32(a), cpu.F32(b), cpu.F32(bias)
	if len(d) != rows*cols || len(av) != rows*cols || (b != nil && len(bv) != rows*cols) || len(biasv) != cols {
		return &backend.ShapeError{Op: "BiasAct", Msg: "lengths"}
	}
	for i := range d {
		v := av[i]
		if b != nil {
			v = v + bv[i]
		}
		v = v + biasv[i%cols]
		if relu {
			v = max(v, 0)
		}
		d[i] = v
	}
	return nil
}

func (f fusedCPU) ReLUMaskScale(dst, dy, y backend.Buffer, scale float32) error {
	d, g, yv := cpu.F32(dst), cpu.F32(dy), cpu.F32(y)
	if len(g) != len(d) || len(yv) != len(d) {
		return &backend.ShapeError{Op: "ReLUMaskScale", Msg: "lengths"}
	}
	for i := range d {
		v := float32(0)
		if yv[i] > 0 {
			v = g[i] * scale
		}
		d[i] = v
	}
	return nil
}

// TestFusedPathEqualsComposed: with the fused methods present the engine
// produces the run it produces with the composed primitives (one device:
// also the nn model's, see TestExactEqualsSingleDevice).
func TestFusedPathEqualsComposed(t *testing.T) {
	ds := cora(t)
	epochs := 3
	if testing.Short() {
		epochs = 2
	}
	for _, model := range []string{GCN, SAGE} {
		for _, p := range []int{1, 2} {
			cfg := Defaults(model)
			cfg.Epochs = epochs
			want := run(t, ds, cfg, p)
			bs := devices(t, p)
			for i := range bs {
				bs[i] = fusedCPU{bs[i]}
			}
			got, err := Run(context.Background(), ds, cfg, Options{Backends: bs})
			if err != nil {
				t.Fatal(err)
			}
			for e := range want.Epochs {
				if got.Epochs[e].Loss != want.Epochs[e].Loss || got.Epochs[e].TestAccuracy != want.Epochs[e].TestAccuracy {
					t.Fatalf("%s P=%d epoch %d: fused loss %v acc %v, composed %v %v", model, p, e+1,
						got.Epochs[e].Loss, got.Epochs[e].TestAccuracy, want.Epochs[e].Loss, want.Epochs[e].TestAccuracy)
				}
			}
		}
	}
}

// TestGivenOffsets: a dataset partitioned beforehand and run with its
// offsets equals the run that partitions it; bad offsets are refused.
func TestGivenOffsets(t *testing.T) {
	ds := cora(t)
	cfg := Defaults(GCN)
	cfg.Epochs = 2
	want := run(t, ds, cfg, 3)
	pds, off, err := PartitionDataset(context.Background(), ds, 3, cfg.Partition, cfg.PartitionSeed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Run(context.Background(), pds, cfg, Options{Backends: devices(t, 3), Offsets: off})
	if err != nil {
		t.Fatal(err)
	}
	for e := range want.Epochs {
		if got.Epochs[e].Loss != want.Epochs[e].Loss {
			t.Fatalf("epoch %d: loss %v with given offsets, %v partitioning", e+1, got.Epochs[e].Loss, want.Epochs[e].Loss)
		}
	}
	if got.Partition.Method != "given" || !reflect.DeepEqual(got.Partition.Sizes, want.Partition.Sizes) {
		t.Errorf("partition %+v, want the sizes of %+v", got.Partition, want.Partition)
	}
	n := ds.NumNodes()
	for name, o := range map[string][]int64{"count": {0, n}, "end": {0, 5, 10, n - 1}, "empty": {0, 5, 5, n}} {
		_, err := Run(context.Background(), pds, cfg, Options{Backends: devices(t, 3), Offsets: o})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "offsets" {
			t.Errorf("%s: got %v, want an offsets *ConfigError", name, err)
		}
	}
	b := cpuBackend(t)
	dcs := deviceComms(t, b, 2)
	_, err = Run(context.Background(), ds, cfg, Options{Backends: []backend.Backend{b, b, b}, DeviceComms: dcs})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "comms" {
		t.Errorf("2 device comms for 3 devices: got %v", err)
	}
}

// TestRowsAndTranspose: Layout.Rows holds each device's rows unsplit in
// the full rows' order, and SubBlock.Transpose is the transpose of the
// block restricted to the used columns, entries by increasing row, also
// when it runs in parallel chunks.
func TestRowsAndTranspose(t *testing.T) {
	g := smallGraph()
	for _, off := range [][]int64{{0, 7}, {0, 3, 7}, {0, 2, 4, 5, 7}} {
		for _, agg := range []Aggregation{AggGCN, AggMean} {
			l, err := NewLayout(g, off, agg)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewLayout(g, []int64{0, 7}, agg)
			if err != nil {
				t.Fatal(err)
			}
			full := &ref.Rows[0]
			for d := range l.Rows {
				r := &l.Rows[d]
				lo, hi := l.Range(d)
				if r.Rows != hi-lo || r.Cols != 7 {
					t.Fatalf("%v %v: Rows[%d] is %dx%d", agg, off, d, r.Rows, r.Cols)
				}
				for i := 0; i < r.Rows; i++ {
					a := r.Indices[r.Indptr[i]:r.Indptr[i+1]]
					b := full.Indices[full.Indptr[lo+i]:full.Indptr[lo+i+1]]
					wa := r.Weights[r.Indptr[i]:r.Indptr[i+1]]
					wb := full.Weights[full.Indptr[lo+i]:full.Indptr[lo+i+1]]
					if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(wa, wb) {
						t.Fatalf("%v %v: row %d of device %d is %v %v, want %v %v", agg, off, i, d, a, wa, b, wb)
					}
				}
				for s := range l.Blocks[d] {
					checkTranspose(t, &l.Blocks[d][s], l.Used[d][s])
				}
			}
		}
	}
	// Large enough for the parallel chunks.
	r := rand.New(rand.NewPCG(1, 2))
	b := &SubBlock{Rows: 3000, Cols: 5000, Indptr: []int64{0}}
	for i := 0; i < b.Rows; i++ {
		for k := r.IntN(800); k > 0; k-- {
			b.Indices = append(b.Indices, int32(r.IntN(b.Cols)))
			b.Weights = append(b.Weights, r.Float32())
		}
		b.Indptr = append(b.Indptr, int64(len(b.Indices)))
	}
	if b.NNZ() < 1<<20 {
		t.Fatalf("only %d entries", b.NNZ())
	}
	checkTranspose(t, b, nil)
	used := usedColumns(b)
	checkTranspose(t, b, used[:len(used)-1:len(used)-1]) // a listed column missing: refused below
}

// checkTranspose compares b.Transpose(cols) with a direct construction.
func checkTranspose(t *testing.T, b *SubBlock, cols []int32) {
	t.Helper()
	got, err := b.Transpose(cols)
	pos := map[int32]int{}
	for k, j := range cols {
		pos[j] = k
	}
	n := b.Cols
	if cols != nil {
		n = len(cols)
		for _, j := range b.Indices {
			if _, ok := pos[j]; !ok {
				if err == nil {
					t.Fatalf("column %d not listed: no error", j)
				}
				return
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		i int32
		w float32
	}
	want := make([][]ent, n)
	for i := 0; i < b.Rows; i++ {
		for e := b.Indptr[i]; e < b.Indptr[i+1]; e++ {
			k := int(b.Indices[e])
			if cols != nil {
				k = pos[b.Indices[e]]
			}
			want[k] = append(want[k], ent{int32(i), b.Weights[e]})
		}
	}
	if got.Rows != n || got.Cols != b.Rows || got.NNZ() != b.NNZ() {
		t.Fatalf("transpose is %dx%d with %d entries, want %dx%d with %d", got.Rows, got.Cols, got.NNZ(), n, b.Rows, b.NNZ())
	}
	for k := 0; k < n; k++ {
		row := got.Indices[got.Indptr[k]:got.Indptr[k+1]]
		if len(row) != len(want[k]) {
			t.Fatalf("row %d has %d entries, want %d", k, len(row), len(want[k]))
		}
		for q, e := range want[k] {
			if row[q] != e.i || got.Weights[got.Indptr[k]+int64(q)] != e.w {
				t.Fatalf("row %d entry %d: (%d, %v), want (%d, %v)", k, q, row[q], got.Weights[got.Indptr[k]+int64(q)], e.i, e.w)
			}
		}
	}
}

// TestApplyPartitionFile: a partition file renumbers the dataset exactly
// as the in-process partitioner does for the same parts; a file for
// another dataset is refused.
func TestApplyPartitionFile(t *testing.T) {
	ds := cora(t)
	res, err := partition.Partition(context.Background(), ds.Graph, partition.Options{K: 3, Seed: 1, Method: partition.Multilevel})
	if err != nil {
		t.Fatal(err)
	}
	ren, err := partition.Renumber(res.Parts, 3)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), partition.FileName)
	saved := &partition.Saved{Book: ren.Book, NewToOld: ren.NewToOld, PartWeights: make([]int64, 3), NCon: 1,
		Meta: partition.Meta{Dataset: ds.Name, Method: partition.Multilevel}}
	if err := partition.WriteFile(path, saved, true); err != nil {
		t.Fatal(err)
	}
	pds, off, err := ApplyPartitionFile(ds, path)
	if err != nil {
		t.Fatal(err)
	}
	want, woff, err := PartitionDataset(context.Background(), ds, 3, PartitionMultilevel, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(off, woff) || !reflect.DeepEqual(pds.Graph.Indices, want.Graph.Indices) || !reflect.DeepEqual(pds.Labels, want.Labels) {
		t.Fatalf("offsets %v vs %v, or the renumbered graphs differ", off, woff)
	}
	other := *ds
	other.Name = "other"
	var de *DataError
	if _, _, err := ApplyPartitionFile(&other, path); !errors.As(err, &de) {
		t.Errorf("another dataset's file: got %v", err)
	}
	if _, _, err := ApplyPartitionFile(ds, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file accepted")
	}
	// With the dataset's fingerprint recorded (as 'strata partition'
	// does), a dataset of the same name and size but other content is
	// refused, naming both fingerprints.
	saved.Meta.DatasetFingerprint = ds.Fingerprint()
	if err := partition.WriteFile(path, saved, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ApplyPartitionFile(ds, path); err != nil {
		t.Fatal(err)
	}
	same := *ds
	same.Features = append([]float32(nil), ds.Features...)
	same.Features[0]++
	_, _, err = ApplyPartitionFile(&same, path)
	if !errors.As(err, &de) || !strings.Contains(err.Error(), ds.Fingerprint()) || !strings.Contains(err.Error(), same.Fingerprint()) {
		t.Errorf("same-size dataset with other features: %v", err)
	}
}

// TestDegreeOrder: renumbering the nodes by degree within the blocks
// relabels the graph without changing the model: without dropout (whose
// masks follow the IDs) the losses equal those of the original order up to
// summation order, on one device and on three.
func TestDegreeOrder(t *testing.T) {
	ds := cora(t)
	epochs := 4
	if testing.Short() {
		epochs = 2
	}
	for _, p := range []int{1, 3} {
		cfg := Defaults(SAGE)
		cfg.Epochs, cfg.Dropout = epochs, 0
		want := run(t, ds, cfg, p)
		cfg.Order = OrderDegree
		got := run(t, ds, cfg, p)
		for e := range want.Epochs {
			if d := relDiff(got.Epochs[e].Loss, want.Epochs[e].Loss); d > 1e-5 {
				t.Fatalf("P=%d epoch %d: loss %v in degree order, %v in the original (rel diff %.2g)", p, e+1, got.Epochs[e].Loss, want.Epochs[e].Loss, d)
			}
		}
		if !strings.HasSuffix(got.Partition.Method, "nodes by degree") || !reflect.DeepEqual(got.Partition.Sizes, want.Partition.Sizes) {
			t.Errorf("P=%d: partition %+v, want the sizes of %+v", p, got.Partition, want.Partition)
		}
	}
	// The order itself: descending degree inside each block.
	g := smallGraph()
	off := []int64{0, 3, 7}
	o := degreeOrder(g, off)
	deg := func(v int) int64 { return g.Indptr[v+1] - g.Indptr[v] }
	newToOld := make([]int, len(o))
	for old, nw := range o {
		newToOld[nw] = old
	}
	for b := 0; b < 2; b++ {
		for u := off[b]; u < off[b+1]; u++ {
			if v := newToOld[u]; int64(v) < off[b] || int64(v) >= off[b+1] {
				t.Fatalf("node %d left its block", v)
			}
			if u > off[b] && deg(newToOld[u-1]) < deg(newToOld[u]) {
				t.Fatalf("order %v: not by descending degree in block %d", o, b)
			}
		}
	}
}

// TestOpenDeviceCommsChecksGPUShm: the gpushm settings of CommOptions are
// checked whatever the kind (a bad one is reported on CPU devices too,
// where auto would stage through the host), and good ones open.
func TestOpenDeviceCommsChecksGPUShm(t *testing.T) {
	bs := devices(t, 2)
	for _, kind := range []string{CommAuto, CommHost, CommGPUShm} {
		_, _, _, err := OpenDeviceComms(context.Background(), kind, bs, CommOptions{GPUShm: gpushm.Options{Slots: 1}})
		var oe *gpushm.OptionError
		if !errors.As(err, &oe) || oe.Field != "Slots" {
			t.Errorf("%s with Slots 1: %v, want a gpushm.OptionError on Slots", kind, err)
		}
	}
	dcs, used, _, err := OpenDeviceComms(context.Background(), CommAuto, bs, CommOptions{GPUShm: gpushm.Options{Slots: 4, Idle: gpushm.IdleGoSleep}})
	if err != nil || used != CommHost || dcs != nil {
		t.Errorf("auto on CPU devices with good gpushm settings: %v, %q, %v", dcs, used, err)
	}
}
