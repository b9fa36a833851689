package sample_test

import (
	"fmt"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

func Example() {
	// A directed graph as (src, dst) edges; sampling reads in-neighbors,
	// so build the out-adjacency and transpose it.
	src := []graph.NodeID{1, 2, 3, 4, 5, 2, 3, 0}
	dst := []graph.NodeID{0, 0, 0, 0, 0, 1, 1, 2}
	out, _ := graph.FromEdges(6, src, dst)
	in, _ := graph.Transpose(out)

	s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: []int{3, 2}})
	if err != nil {
		panic(err)
	}
	train := []graph.NodeID{0, 1, 2}
	batches, _ := sample.SeedBatches(train, 2, sample.Key{Seed: 7, Epoch: 0})
	for i, seeds := range batches {
		mb, err := s.Sample(seeds, sample.Key{Seed: 7, Epoch: 0, Batch: i})
		if err != nil {
			panic(err)
		}
		last := mb.Blocks[len(mb.Blocks)-1]
		fmt.Printf("batch %d: seeds %v, seeds' block %d dst / %d src / %d edges, inputs %d\n",
			i, mb.Seeds, last.NumDst, last.NumSrc(), last.NumEdges(), len(mb.InputNodes()))
	}
	// Output:
	// batch 0: seeds [0 1], seeds' block 2 dst / 6 src / 5 edges, inputs 6
	// batch 1: seeds [2], seeds' block 1 dst / 2 src / 1 edges, inputs 4
}
