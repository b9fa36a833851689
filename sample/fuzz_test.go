package sample

import (
	"errors"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// FuzzNeighborSampler: arbitrary small graphs, weights, fanouts and seeds.
// The sampler must never panic; it either returns a typed error or a batch
// that passes every structural check.
func FuzzNeighborSampler(f *testing.F) {
	f.Add(uint8(5), []byte{0, 1, 1, 2, 2, 0, 4, 3, 4, 0}, []byte{3, 2}, []byte{4, 1}, uint8(0))
	f.Add(uint8(3), []byte{0, 0, 1, 1, 2, 2}, []byte{255, 1}, []byte{0, 1, 2}, uint8(3))
	f.Add(uint8(2), []byte{}, []byte{0}, []byte{1, 1}, uint8(1))
	f.Fuzz(func(t *testing.T, n uint8, edges, fanouts, seeds []byte, flags uint8) {
		nodes := int64(n%40) + 1
		var src, dst []graph.NodeID
		var w []float32
		for i := 0; i+1 < len(edges) && len(src) < 400; i += 2 {
			src = append(src, graph.NodeID(int64(edges[i])%nodes))
			dst = append(dst, graph.NodeID(int64(edges[i+1])%nodes))
			w = append(w, float32(edges[i]%4))
		}
		g, err := graph.FromEdges(nodes, dst, src, graph.WithWeights(w)) // in-adjacency
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Replace: flags&1 != 0, Weighted: flags&2 != 0, Workers: int(flags>>2) % 4}
		for _, b := range fanouts[:min(len(fanouts), 4)] {
			cfg.Fanouts = append(cfg.Fanouts, int(int8(b))%20)
		}
		var sd []graph.NodeID
		for _, b := range seeds[:min(len(seeds), 50)] {
			sd = append(sd, graph.NodeID(int8(b)))
		}
		s, err := NewNeighborSampler(g, cfg)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("unexpected constructor error %v", err)
			}
			return
		}
		mb, err := s.Sample(sd, Key{Seed: uint64(flags)})
		if err != nil {
			if !errors.Is(err, ErrNode) && !errors.Is(err, ErrDuplicate) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkBatch(t, g, cfg, sd, mb)
	})
}
