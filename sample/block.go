package sample

import "github.com/strata-gnn/strata/graph"

// Block is one layer's bipartite message-flow graph. Destination nodes are
// the first NumDst entries of SrcNodes (seeds first, as in DGL's to_block),
// so a layer's output rows line up with the next block's inputs.
//
// Row i of the CSR (i < NumDst) lists the local source indices (positions in
// SrcNodes) of the sampled in-neighbors of destination i.
type Block struct {
	SrcNodes []graph.NodeID // global IDs; SrcNodes[:NumDst] are the destinations
	NumDst   int
	Indptr   []int64 // len NumDst+1
	Indices  []int32 // local source indices, each in [0, len(SrcNodes))
	// EdgeIDs, when not nil, holds the global edge ID of every sampled edge
	// (position in the graph's Indices), for edge weights or features.
	EdgeIDs []int64
}

// NumSrc is the number of source (input) nodes of the block.
func (b *Block) NumSrc() int { return len(b.SrcNodes) }

// NumEdges is the number of sampled edges.
func (b *Block) NumEdges() int { return len(b.Indices) }

// MiniBatch is a sampled batch: Blocks[0] consumes the input features of
// Blocks[0].SrcNodes; the last block's destinations are the seeds.
type MiniBatch struct {
	Seeds  []graph.NodeID
	Blocks []Block
}

// InputNodes returns the nodes whose features the first layer reads.
func (m *MiniBatch) InputNodes() []graph.NodeID { return m.Blocks[0].SrcNodes }

// Key identifies a batch. Samplers derive all randomness from it, which is
// what makes batches independent of scheduling and resumable.
type Key struct {
	Seed  uint64
	Epoch int
	Batch int
}

// Sampler turns seed nodes into a MiniBatch. Node-wise, layer-wise, random
// walk and distributed samplers all implement it, so training loops do not
// change when the sampler does.
type Sampler interface {
	Sample(seeds []graph.NodeID, key Key) (*MiniBatch, error)
}
