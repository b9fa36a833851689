package train

import (
	"errors"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// newSampler builds the node-wise neighbor sampler over the in-adjacency.
// TEMPORARY placeholder until package sample's NeighborSampler lands.
func newSampler(in *graph.CSR, fanouts []int) (sample.Sampler, error) {
	return nil, errors.New("neighbor sampler not available yet")
}
