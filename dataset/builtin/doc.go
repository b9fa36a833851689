// Package builtin ships small datasets compiled into the binary, so that
// examples, tests and `strata train --dataset cora` work with no files.
//
// Cora (2,708 nodes, 10,556 directed edges = 5,278 undirected pairs, 1,433
// binary bag-of-words features, 7 classes, Planetoid split 140/500/1,000) is
// embedded in a compact gzip-compressed form: neighbor lists and feature
// columns gap-coded as varints, labels and splits likewise, with a CRC-32C
// over the payload (see Encode and docs/dataset-format.md). The asset is
// rebuilt from the shared datasets folder with `go generate` (see
// internal/mkcora); Load decodes and validates it on every call.
package builtin
