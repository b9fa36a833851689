package train

import (
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
)

// newSampler builds the node-wise neighbor sampler (uniform, without
// replacement) over the in-adjacency; fanouts are seeds' hop first.
func newSampler(in *graph.CSR, fanouts []int) (sample.Sampler, error) {
	return sample.NewNeighborSampler(in, sample.Config{Fanouts: fanouts})
}
