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
// # Helpers for trainers
//
// Validate checks an in-memory dataset; InAdjacency/InGraph give the
// in-neighbor CSR that message passing reads; RowNormalize is the GCN/GAT
// feature preprocessing.
package dataset
