// Package dataset reads and writes Strata's on-disk dataset format (a
// directory holding a versioned, checksummed manifest and little-endian
// binary arrays that can be memory-mapped), and defines the in-memory
// Dataset that every importer, generator and trainer exchanges.
//
// Every reader validates what it reads (IDs and offsets in range, counts
// consistent, checksums) and reports problems as *FormatError naming the
// file and byte offset.
package dataset
