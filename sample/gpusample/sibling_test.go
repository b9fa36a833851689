package gpusample

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// TestSiblingMatches: a sibling (another handle of the GPU) reads the
// first sampler's topology in place and draws its batches, weighted or
// not, with every placement; it owns no topology, a closed sampler has
// none, and closing the sibling leaves the first one working.
func TestSiblingMatches(t *testing.T) {
	d := gpu(t)
	h, err := d.Sibling(backend.SiblingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	g := randomGraph(7, 20000, 12)
	r := rand.New(rand.NewPCG(8, 9))
	for _, cfg := range []Config{
		{Fanouts: []int{15, 10, 5}},
		{Fanouts: []int{10, 5}, Weighted: true, Replace: true},
		{Fanouts: []int{10, 5}, Weighted: true},
		{Fanouts: []int{3, -1}, Placement: Mapped},
		{Fanouts: []int{15, 10}, Placement: Split, DeviceRows: everyThird(g.NumRows)},
	} {
		name := fmt.Sprintf("%+v", cfg)
		s, err := New(d, g, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sib, err := s.Sibling(h)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if dv, hs := sib.TopologyBytes(); dv != 0 || hs != 0 {
			t.Errorf("%s: sibling owns %d device and %d host bytes of topology", name, dv, hs)
		}
		for b := range 3 {
			seeds := seedsOf(r, int(g.NumRows), 700)
			key := sample.Key{Seed: 3, Batch: b}
			want, err := s.Sample(seeds, key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sib.Sample(seeds, key)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			compareBatches(t, name, got, want)
		}
		if err := sib.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sample([]graph.NodeID{1, 2}, sample.Key{Seed: 1}); err != nil {
			t.Fatalf("%s: after closing the sibling: %v", name, err)
		}
		s.Close()
		if _, err := s.Sibling(h); err == nil {
			t.Errorf("%s: sibling of a closed sampler", name)
		}
	}
	if _, err := (&Sampler{dev: d}).Sibling(nil); err == nil {
		t.Error("sibling on a nil device")
	}
}
