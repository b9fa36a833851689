package gpusample

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestAsyncMatchesSync queues several batches before waiting for any and
// requires each to equal the same batch drawn synchronously.
func TestAsyncMatchesSync(t *testing.T) {
	d := gpu(t)
	g := randomGraph(11, 5000, 9)
	gs, err := New(d, g, Config{Fanouts: []int{7, -1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	r := rand.New(rand.NewPCG(3, 3))
	var seeds [][]graph.NodeID
	var pend []*Pending
	for b := 0; b < 4; b++ {
		seeds = append(seeds, seedsOf(r, 5000, 300))
		p, err := gs.SampleAsync(seeds[b], sample.Key{Seed: 5, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, p)
	}
	for b, p := range pend {
		bt, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		got, err := bt.Download()
		bt.Free()
		if err != nil {
			t.Fatal(err)
		}
		want, err := gs.Sample(seeds[b], sample.Key{Seed: 5, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d: queued batch differs from a synchronous one", b)
		}
		if _, err := p.Wait(); err == nil {
			t.Fatalf("batch %d: second Wait accepted", b)
		}
	}
}

// TestNNBlocksMatchHost runs each model over the GPU batch's blocks handed
// to nn without a host copy and over blocks uploaded from the downloaded
// batch, and requires the same logits and gradients.
func TestNNBlocksMatchHost(t *testing.T) {
	d := gpu(t)
	g := randomGraph(12, 3000, 8)
	for v := 0; v < 3000; v += 7 { // some self loops
		g.Indices[g.Indptr[v]] = int32(v)
	}
	gs, err := New(d, g, Config{Fanouts: []int{5, 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	r := rand.New(rand.NewPCG(4, 4))
	seeds := seedsOf(r, 3000, 200)
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		bt, err := gs.SampleDevice(seeds, sample.Key{Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		mb, err := bt.Download()
		if err != nil {
			t.Fatal(err)
		}
		dev, err := bt.NNBlocks()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bt.Download(); err == nil {
			t.Fatal("Download after NNBlocks accepted")
		}
		var host []*nn.Block
		for i := range mb.Blocks {
			k, err := nn.UploadBlock(d, &mb.Blocks[i])
			if err != nil {
				t.Fatal(err)
			}
			host = append(host, k)
		}
		nin := mb.Blocks[0].NumSrc()
		want := runOn(t, d, kind, host, nin, len(seeds))
		got := runOn(t, d, kind, dev, nin, len(seeds))
		for i := range want {
			if diff := math.Abs(float64(got[i] - want[i])); diff > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: value %d = %v, want %v", kind, i, got[i], want[i])
			}
		}
		for _, k := range append(host, dev...) {
			k.Free()
		}
		bt.Free()
	}
}

// runOn runs a 2-layer model forward and backward over blocks with nin
// inputs of width 12 and returns logits and parameter gradients.
func runOn(t *testing.T, d backend.Backend, kind string, blocks []*nn.Block, nin, nseeds int) []float32 {
	t.Helper()
	m, err := nn.New(d, nn.Config{Kind: kind, InDim: 12, Hidden: 8, OutDim: 5, Layers: 2, Heads: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(d, m.Params())
	tape := autograd.NewTape(d)
	defer tape.Release()
	x := make([]float32, nin*12)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.1))
	}
	xv, err := tape.Upload(x, nin, 12)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward(tape, xv, blocks, true, 9)
	if err != nil {
		t.Fatal(err)
	}
	logp, err := tape.LogSoftmax(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]int32, nseeds)
	labels := make([]int32, nseeds)
	for i := range rows {
		rows[i], labels[i] = int32(i), int32(i%5)
	}
	rb, _ := d.Alloc(backend.Int32, nseeds)
	lb, _ := d.Alloc(backend.Int32, nseeds)
	defer d.Free(rb)
	defer d.Free(lb)
	d.Upload(rb, rows)
	d.Upload(lb, labels)
	loss, err := nn.NLLLoss(tape, logp, rb, lb)
	if err != nil {
		t.Fatal(err)
	}
	if err := tape.Backward(loss); err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, out.Len())
	if err := d.Download(vals, out.Value); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		g := make([]float32, p.Grad.Len())
		if err := d.Download(g, p.Grad); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, g...)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return vals
}
