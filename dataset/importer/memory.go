package importer

import (
	"fmt"

	"github.com/strata-gnn/strata/internal/sysmem"
)

// MemoryError says an import would need more memory than it may use. It
// is returned before the graph is built, so nothing was sized.
type MemoryError struct {
	Path         string
	Nodes, Edges int64
	Need         int64  // estimated bytes (EstimateBytes)
	Limit        int64  // what the import may use
	Source       string // where Limit comes from ("MemAvailable", "Options.MaxBytes", ...)
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("importer: %s: %d nodes and %d edges need about %s to import, more than the %s available (%s)",
		e.Path, e.Nodes, e.Edges, sysmem.Format(e.Need), sysmem.Format(e.Limit), e.Source)
}

// EstimateBytes estimates the memory an import of nodes nodes and edges
// edges takes while it builds the graph: the edge list read (two int32
// per edge, with the slack of growing slices), the CSR indices (twice
// with symmetrize), and per node the row offsets, the fill cursors and
// the row lengths of the build and the in-degree count of validation
// (8 bytes each). Features, labels and splits come from files whose size
// bounds them.
func EstimateBytes(nodes, edges int64, symmetrize bool) int64 {
	perEdge := int64(16 + 4)
	if symmetrize {
		perEdge += 4
	}
	n, m := float64(nodes), float64(edges)
	est := 32*n + float64(perEdge)*m
	if est > 1<<62 {
		return 1 << 62
	}
	return int64(est)
}

// checkMemory returns a *MemoryError when EstimateBytes(nodes, edges)
// exceeds opts.MaxBytes (0: the memory the machine has left, unchecked
// where it cannot be read; negative: no check).
func checkMemory(path string, nodes, edges int64, opts Options) error {
	if opts.MaxBytes < 0 {
		return nil
	}
	limit, source := opts.MaxBytes, "Options.MaxBytes"
	if limit == 0 {
		b, ok := sysmem.Available()
		if !ok {
			return nil
		}
		limit, source = b.Bytes, b.Source
	}
	if need := EstimateBytes(nodes, edges, opts.Symmetrize); need > limit {
		return &MemoryError{Path: path, Nodes: nodes, Edges: edges, Need: need, Limit: limit, Source: source}
	}
	return nil
}
