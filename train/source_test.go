package train

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// hostSource is a BatchSource built from the host sampler, for testing
// the runner's source path without a GPU. It records the prefetches.
type hostSource struct {
	b          backend.Backend
	s          sample.Sampler
	x          []float32
	cols       int
	pending    *sample.Key
	prefetches int
	hits       int
	closed     bool
}

func (h *hostSource) Prefetch(seeds []int32, key sample.Key) error {
	h.pending = &key
	h.prefetches++
	return nil
}

func (h *hostSource) Batch(seeds []int32, key sample.Key) ([]*nn.Block, backend.Buffer, func(), error) {
	if h.pending != nil && *h.pending == key {
		h.hits++
	}
	h.pending = nil
	mb, err := h.s.Sample(seeds, key)
	if err != nil {
		return nil, nil, nil, err
	}
	blocks, err := nn.UploadBlocks(h.b, mb)
	if err != nil {
		return nil, nil, nil, err
	}
	release := func() { nn.FreeBlocks(blocks) }
	in := mb.InputNodes()
	x := make([]float32, 0, len(in)*h.cols)
	for _, v := range in {
		x = append(x, h.x[int(v)*h.cols:int(v+1)*h.cols]...)
	}
	buf, err := h.b.Alloc(backend.Float32, len(x))
	if err == nil {
		err = h.b.Upload(buf, x)
	}
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return blocks, buf, func() { release(); h.b.Free(buf) }, nil
}

func (h *hostSource) Close() error { h.closed = true; return nil }

// TestBatchSourceMatchesHostSampling trains sampled GraphSAGE on dense
// features with and without a BatchSource and requires the same
// accuracies and, up to the float32 loss of nn.NLLLoss, the same losses;
// every batch after an epoch's first must have been prefetched.
func TestBatchSourceMatchesHostSampling(t *testing.T) {
	ds := toyDataset(300, 3)
	for i := range ds.Features { // dense: no sparse first layer
		ds.Features[i] += 0.01 * float32(i%7)
	}
	cfg := Defaults(SAGE)
	cfg.Epochs, cfg.BatchSize = 3, 8
	b := cpuBackend(t)
	ref, err := Run(context.Background(), ds, cfg, Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	var src *hostSource
	got, err := Run(context.Background(), ds, cfg, Options{Backend: b,
		Batches: func(bb backend.Backend, in *graph.CSR, x []float32, rows, cols int, fanouts []int) (BatchSource, error) {
			s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: fanouts})
			if err != nil {
				return nil, err
			}
			if rows != int(ds.NumNodes()) || len(x) != rows*cols || !slices.Equal(fanouts, cfg.Fanouts) {
				t.Errorf("source made for %d x %d features (%d values), fanouts %v", rows, cols, len(x), fanouts)
			}
			src = &hostSource{b: bb, s: s, x: x, cols: cols}
			return src, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if src == nil || !src.closed {
		t.Fatal("the source was not made or not closed")
	}
	nb := (len(ds.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	if want := cfg.Epochs * (nb - 1); src.prefetches != want || src.hits != want {
		t.Fatalf("%d prefetches, %d used, want %d", src.prefetches, src.hits, want)
	}
	la, lb := losses(ref), losses(got)
	if len(la) != len(lb) {
		t.Fatalf("%d vs %d losses", len(la), len(lb))
	}
	for i := range la {
		if math.Abs(la[i]-lb[i]) > 1e-5*math.Abs(la[i]) {
			t.Fatalf("batch %d: loss %v with the source, %v without", i, lb[i], la[i])
		}
	}
	if ref.TestAccuracy != got.TestAccuracy || ref.ValAccuracy != got.ValAccuracy {
		t.Fatalf("accuracies val %v test %v with the source, %v %v without", got.ValAccuracy, got.TestAccuracy, ref.ValAccuracy, ref.TestAccuracy)
	}
}

// dropSource is a hostSource that applies input dropout itself
// (DropoutBatchSource), as train/gputrain's gather does.
type dropSource struct {
	*hostSource
	dropped int
}

func (d *dropSource) BatchDropout(seeds []int32, key sample.Key, p float32, seed uint64) ([]*nn.Block, backend.Buffer, func(), error) {
	blocks, x, release, err := d.Batch(seeds, key)
	if err != nil {
		return nil, nil, nil, err
	}
	mask, err := d.b.Alloc(backend.Float32, x.Len())
	if err == nil {
		err = d.b.Dropout(x, mask, x, p, seed)
		d.b.Free(mask)
	}
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	d.dropped++
	return blocks, x, release, nil
}

// TestBatchSourceInputDropout trains with a source that drops the input
// features out while it gathers them: the model must not drop them again,
// so the losses equal those of the host path, where the model applies
// the input dropout itself.
func TestBatchSourceInputDropout(t *testing.T) {
	ds := toyDataset(300, 3)
	for i := range ds.Features {
		ds.Features[i] += 0.01 * float32(i%7)
	}
	cfg := Defaults(SAGE)
	cfg.Epochs, cfg.BatchSize = 2, 8
	b := cpuBackend(t)
	ref, err := Run(context.Background(), ds, cfg, Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	var src *dropSource
	got, err := Run(context.Background(), ds, cfg, Options{Backend: b,
		Batches: func(bb backend.Backend, in *graph.CSR, x []float32, rows, cols int, fanouts []int) (BatchSource, error) {
			s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: fanouts})
			if err != nil {
				return nil, err
			}
			src = &dropSource{hostSource: &hostSource{b: bb, s: s, x: x, cols: cols}}
			return src, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	nb := (len(ds.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	if src == nil || src.dropped != cfg.Epochs*nb {
		t.Fatalf("the source dropped out %v batches' inputs, want %d", src, cfg.Epochs*nb)
	}
	la, lb := losses(ref), losses(got)
	if len(la) != len(lb) {
		t.Fatalf("%d vs %d losses", len(la), len(lb))
	}
	for i := range la {
		if math.Abs(la[i]-lb[i]) > 1e-5*math.Abs(la[i]) {
			t.Fatalf("batch %d: loss %v with the dropping source, %v without", i, lb[i], la[i])
		}
	}
}
