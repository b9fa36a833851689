// Package dataset reads and writes Strata's on-disk dataset format (a
// directory holding a versioned, checksummed manifest and little-endian
// binary arrays that can be memory-mapped), and defines the in-memory
// Dataset that every importer, generator and trainer exchanges. The format
// is specified in docs/dataset-format.md.
//
// # Writing and reading
//
//	err := dataset.Write("out/cora", d, dataset.WriteOptions{})
//	d, err := dataset.Open("out/cora", dataset.OpenOptions{})
//	defer d.Close()
//	s, err := dataset.Info("out/cora") // manifest only, for `strata info`
//
// Write is atomic (temporary directory, fsync, rename) and streams each
// array from memory while computing its checksums. Open memory-maps the
// arrays read-only (zero copy; NoMmap reads them into the heap instead),
// verifies their CRC-32C block checksums (unless SkipChecksums) and the
// dataset's structure. Mapped arrays must not be written to: use
// RowNormalize / WithRowNormalizedFeatures, which copy.
//
// # Errors
//
// Every reader validates what it reads (IDs and offsets in range, counts
// consistent, checksums) and reports problems as *FormatError naming the
// file and byte offset; it wraps ErrCorruption (and ErrUnsupportedVersion
// for a manifest from a newer format). Declared lengths are checked against
// the actual file sizes before anything is mapped or allocated.
//
// # Typed datasets
//
// Hetero is a typed (heterogeneous) dataset, format version 2
// (WriteHetero, OpenHetero, HeteroInfo; Open refuses it with
// ErrHeterogeneous): node types with their own features and widths,
// relations (src, rel, dst), labels and splits on one target type.
//
// In memory, node IDs are local to their type, with global IDs (the
// types' ranges one after the other, Offsets) only where the types are
// erased; each relation is its own CSR grouped by destination (row v, a
// node of the destination type, lists its sources of the source type),
// stored that way on disk too. This layout was chosen for sampling and
// message passing: a node's neighbors through one relation are one
// contiguous row found in O(1), so per-relation fanouts draw exactly as
// homogeneous sampling does (sample.HeteroSampler hands each relation to
// the homogeneous sampler's code) and each relation becomes one sparse
// matrix of a typed block; the alternative, one CSR over global IDs with
// an edge-type array, would need a search per row and relation to find a
// relation's neighbors (or a per-node, per-relation offset table as large
// as the relations' indptrs together); and storing relations by source,
// as version 1 stores its graph, would cost a transpose at load.
// Homogeneous code is untouched: Dataset, Open and the trainers never see
// a Hetero, and Erased/ToHomogeneous turn one into the graph with its
// types erased for comparisons.
//
// # Helpers for trainers
//
// Validate checks an in-memory dataset (ValidateHetero a typed one);
// InAdjacency/InGraph give the in-neighbor CSR that message passing
// reads; RowNormalize is the GCN/GAT feature preprocessing.
package dataset
