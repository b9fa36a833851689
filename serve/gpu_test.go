package serve

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestGPUSamplerServesTheSameBatches serves through the GPU sampler (what
// `strata serve --device cuda` does): its MiniBatches, converted by
// FromMiniBatch, must be the CPU sampler's PyG batches byte for byte
// (uniform draws are the same on both). Skipped without a GPU.
func TestGPUSamplerServesTheSameBatches(t *testing.T) {
	var dev backend.Backend = gputest.One(t)
	ds := tiny(t)
	in := ds.InGraph()
	made := 0
	_, addr := start(t, Options{Device: dev.Name(), NewSamplers: func(f []int, replace bool) ([]sample.Sampler, error) {
		made++
		s, err := gpusample.New(dev, in, gpusample.Config{Fanouts: f, Replace: replace})
		if err != nil {
			return nil, err
		}
		return []sample.Sampler{s}, nil
	}})
	c := dial(t, addr, ClientOptions{})
	for _, req := range []*servepb.SampleRequest{
		{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 64, Fanouts: []int32{15, 10, 5}, Shuffle: true, Seed: 3, Workers: 4, WithFeatures: true},
		{Split: servepb.Split_SPLIT_ALL, BatchSize: 500, Fanouts: []int32{-1, 3}, Seed: 8, Epoch: 2, Rank: 1, WorldSize: 2},
		{Split: servepb.Split_SPLIT_TEST, BatchSize: 100, Fanouts: []int32{4, 4}, Replace: true, Seed: 1},
	} {
		seeds := map[servepb.Split][]int32{servepb.Split_SPLIT_TRAIN: ds.Train, servepb.Split_SPLIT_TEST: ds.Test}[req.Split]
		if req.Split == servepb.Split_SPLIT_ALL {
			for v := range int32(ds.NumNodes()) {
				seeds = append(seeds, v)
			}
		}
		got := collect(t, c, req)
		if len(got) == 0 {
			t.Fatal("no batches")
		}
		for i, b := range got {
			want, in := expect(t, ds, req, seeds, i)
			checkBatch(t, ds, b, want, in)
		}
	}
	if made != 3 {
		t.Fatalf("%d GPU samplers made for 3 configurations", made)
	}
}
