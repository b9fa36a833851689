package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestGPUResident: on 2 GPUs (and 4 when visible) the hidden layers stay
// on the GPUs (ResidentAuto: the GPUs report their memory, Cora fits),
// their rows exchanged over NCCL, and the logits agree with the CPU's
// to 1e-4 (cuBLAS rounds differently), for SAGE, GCN and GAT, every node
// and a few, with uneven ranges; the GPUs' host path gives the same
// logits to 1e-5. Skipped without 2 GPUs.
func TestGPUResident(t *testing.T) {
	ds, in := cora(t)
	cpu := newCPU(t)
	gpuLayouts(t, int64(ds.NumNodes()), func(bs []backend.Backend, off []int64) {
		k := len(bs)
		for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
			cfg, params := deepModel(t, cpu, kind, ds)
			x := inputs(t, ds, false)
			for _, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000}}} {
				t.Run(fmt.Sprintf("gpus=%d/%s/nodes=%d", k, kind, len(req.Nodes)), func(t *testing.T) {
					want := runOn(t, []backend.Backend{cpu}, cfg, params, in, x, req, Options{Placement: PlaceHost})
					got := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget})
					host := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget, Resident: ResidentOff})
					for i, st := range got.Layers[:len(got.Layers)-1] {
						if st.Output != "resident" {
							t.Fatalf("layer %d went to %q (%s), want resident", i+1, st.Output, st.Why)
						}
					}
					closeLogits(t, "resident", got.Data, want.Data, host.Data)
				})
			}
		}
	})
}

// TestGPUInputShards: on 2 GPUs (and 4 when visible) layer 1 reads the
// features from each GPU's range of the table (Options.InputShards, as a
// feature cache partitioned by range holds them), fetched over NCCL, and
// the logits agree with the CPU's to 1e-4 and with the GPUs' host path
// to 1e-5, for SAGE, GCN and GAT, every node and a few, uneven ranges,
// hidden layers resident. Skipped without 2 GPUs. On the GPU host:
// scripts/gpu.sh test (its "infer GPU 200" runs go test -run GPU ./infer).
func TestGPUInputShards(t *testing.T) {
	ds, in := cora(t)
	cpu := newCPU(t)
	gpuLayouts(t, int64(ds.NumNodes()), func(bs []backend.Backend, off []int64) {
		k := len(bs)
		x := inputs(t, ds, false)
		rows := make([]int, k)
		for d := range rows {
			rows[d] = int(off[d+1] - off[d])
		}
		tables := shardTables(t, bs, x, rows, func(v int32) (int, int32) {
			d := 0
			for int64(v) >= off[d+1] {
				d++
			}
			return d, v - int32(off[d])
		})
		for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
			cfg, params := deepModel(t, cpu, kind, ds)
			for _, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000}}} {
				t.Run(fmt.Sprintf("gpus=%d/%s/nodes=%d", k, kind, len(req.Nodes)), func(t *testing.T) {
					want := runOn(t, []backend.Backend{cpu}, cfg, params, in, x, req, Options{Placement: PlaceHost})
					host := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget, Resident: ResidentOff, Placement: PlaceHost})
					got := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget, InputShards: &Shards{Tables: tables, Rows: rows}})
					if st := got.Layers[0]; st.Input != "shards" {
						t.Fatalf("layer 1 read its input from %q, want the shards", st.Input)
					}
					closeLogits(t, "shards", got.Data, want.Data, host.Data)
				})
			}
		}
	})
}

// gpuLayouts runs fn on 2 GPUs and, when visible, on 4, each with uneven
// node ranges of an n-node graph (one of them empty on 4); skipped
// without 2 GPUs.
func gpuLayouts(t *testing.T, n int64, fn func(bs []backend.Backend, off []int64)) {
	all := gputest.All(t)
	if len(all) < 2 {
		t.Skipf("needs 2 GPUs, found %d", len(all))
	}
	for _, k := range []int{2, 4} {
		if len(all) < k {
			t.Logf("skipping %d GPUs: %d visible", k, len(all))
			continue
		}
		bs := make([]backend.Backend, k)
		for i := range bs {
			bs[i] = all[i]
		}
		off := []int64{0, 500, n}
		if k == 4 {
			off = []int64{0, 300, 1500, 1500, n}
		}
		fn(bs, off)
	}
}

// closeLogits holds the GPUs' logits (got, by the path named what) to the
// CPU's (want) within 1e-4 and to the GPUs' host path within 1e-5,
// relative to values of at least 1.
func closeLogits(t *testing.T, what string, got, want, host []float32) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("logit %d: GPUs %v, CPU %v", i, got[i], want[i])
		}
		if d := math.Abs(float64(got[i] - host[i])); d > 1e-5*max(1, math.Abs(float64(host[i]))) {
			t.Fatalf("logit %d: %s %v, the GPUs' host path %v", i, what, got[i], host[i])
		}
	}
}

// TestGPUHotRows: on one GPU, an input gathered on the host with a copy
// of its most-read rows on the GPU (some rows, then every row) gives
// the plain host path's logits bit for bit (the same rows, copied), for
// SAGE, GCN and GAT, every node and a few. Skipped without a GPU.
func TestGPUHotRows(t *testing.T) {
	ds, in := cora(t)
	g := gputest.One(t)
	cpu := newCPU(t)
	bs := []backend.Backend{g}
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		cfg, params := deepModel(t, cpu, kind, ds)
		x := inputs(t, ds, false)
		for _, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000}}} {
			for _, rows := range []int64{300, int64(ds.NumNodes())} {
				t.Run(fmt.Sprintf("%s/nodes=%d/rows=%d", kind, len(req.Nodes), rows), func(t *testing.T) {
					base := Options{Budget: MinBudget, Placement: PlaceHost, Resident: ResidentOff}
					want := runOn(t, bs, cfg, params, in, x, req, base)
					opts := base
					opts.HotBytes = rows * 4 * int64(ds.FeatDim)
					got := runOn(t, bs, cfg, params, in, x, req, opts)
					for _, st := range got.Layers {
						if st.HotRows <= 0 || st.HotReads <= 0 {
							t.Fatalf("layer %d: %d rows kept, %d of %d reads from them", st.Layer, st.HotRows, st.HotReads, st.Reads)
						}
					}
					for i := range want.Data {
						if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
							t.Fatalf("value %d: %v with the copy, %v without", i, got.Data[i], want.Data[i])
						}
					}
				})
			}
		}
	}
}

// TestGPUStagingReuse: on one GPU, layer 1 gathered on the host in chunks
// whose uploads exceed the back end's pinned ring (so each is an
// asynchronous copy straight from a staging slot, which a later chunk
// gathers into again) and its output kept on the GPU, where no chunk ends
// waiting for a download: the logits equal those of the host path
// (outputs downloaded) to 1e-5. A slot refilled before its upload ran
// would feed the next chunk's rows to this one. Skipped without a GPU.
func TestGPUStagingReuse(t *testing.T) {
	g := gputest.One(t)
	cpu := newCPU(t)
	const n, width = 300_000, 128
	in := randomGraph(n, 7)
	rng := rand.New(rand.NewPCG(5, 9))
	x := &Input{Rows: n, Cols: width, Dense: make([]float32, n*width)}
	for i := range x.Dense {
		x.Dense[i] = rng.Float32() - 0.5
	}
	cfg := nn.Config{Kind: nn.KindSAGE, InDim: width, OutDim: 8, Hidden: 32, Layers: 2, NoDropout: true, Seed: 3}
	m, err := nn.New(cpu, cfg)
	if err != nil {
		t.Fatal(err)
	}
	params, err := nn.SaveParams(cpu, m.Params())
	nn.FreeParams(cpu, m.Params())
	if err != nil {
		t.Fatal(err)
	}
	bs := []backend.Backend{g}
	placed := maxPlaced
	maxPlaced = func(uint64) uint64 { return 0 } // every input gathered on the host
	t.Cleanup(func() { maxPlaced = placed })
	opts := Options{Budget: 96 << 20, HotBytes: -1}
	got := runOn(t, bs, cfg, params, in, x, Request{}, opts)
	if st := got.Layers[0]; st.Input != "host" || st.Output != "resident" || st.Chunks < 4 {
		t.Fatalf("layer 1: %d chunks, input %q, output %q (%s); want 4 or more, host, resident", st.Chunks, st.Input, st.Output, st.Why)
	}
	opts.Resident = ResidentOff
	host := runOn(t, bs, cfg, params, in, x, Request{}, opts)
	for i := range host.Data {
		if d := math.Abs(float64(got.Data[i] - host.Data[i])); d > 1e-5*max(1, math.Abs(float64(host.Data[i]))) {
			t.Fatalf("logit %d (node %d): %v with layer 1 resident, %v on the host path", i, i/host.Cols, got.Data[i], host.Data[i])
		}
	}
}
