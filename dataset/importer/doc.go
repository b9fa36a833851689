// Package importer converts datasets from other layouts into Strata's
// in-memory dataset.Dataset (Load) or straight into a Strata dataset
// directory (Import):
//
//   - Shared: the layout of the shared datasets folder (meta.json plus
//     gzip-compressed little-endian arrays), with sha256 verification and
//     Geom-GCN split selection;
//   - OGB: the raw CSV layout of OGB node-property datasets
//     (raw/edge.csv.gz, node-feat, node-label, num-node-list, split/<name>/);
//   - SNAP: whitespace-separated edge-list text, optionally gzip-compressed,
//     with optional dense renumbering of sparse IDs;
//   - NPY: a directory of NumPy .npy arrays (edges, features, labels,
//     splits as IDs or boolean masks).
//
// Every parser bounds declared sizes by what the input actually holds
// before allocating, and reports malformed input as *ParseError naming the
// file and the line (text) or byte offset (binary); ParseError wraps
// dataset.ErrCorruption. Edges are coalesced (duplicates dropped) and rows
// sorted, so the result is the same whatever the input order of duplicate
// edges and whatever the number of CPUs.
package importer
