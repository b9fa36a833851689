// Package importer converts datasets from other layouts into Strata's
// in-memory dataset.Dataset (Load) or straight into a Strata dataset
// directory (Import):
//
//   - Shared: the layout of the shared datasets folder (meta.json plus
//     gzip-compressed little-endian arrays), with sha256 verification and
//     Geom-GCN split selection;
//   - OGB: the raw CSV layout of OGB node-property datasets
//     (raw/edge.csv.gz, node-feat, node-label, num-node-list,
//     num-edge-list, split/<name>/), every stated count checked;
//   - SNAP: whitespace-separated edge-list text ("src dst" or "src dst
//     weight" on every line), optionally gzip-compressed, with optional
//     dense renumbering of sparse IDs;
//   - NPY: a directory of NumPy .npy arrays (edges, features, labels,
//     splits as IDs or boolean masks);
//   - tables (LoadTables): a CSV or Parquet edge table and an optional
//     node table (IDs, feature columns or a list column, labels, splits),
//     streamed row by row (CSV) or page by page (Parquet), with integer or
//     string IDs mapped to 0..N-1 (NodeIDs). Parquet sizes are all checked
//     before the Parquet library reads them (parquet_check.go).
//
// Attach adds .npy features, labels and splits to any of them. Table
// errors are *TableError naming the file, row and column; typed input
// (several edge or node types) is *UnsupportedError until the format
// stores types.
//
// Typed (heterogeneous) layouts are read by LoadHetero / ImportHetero into
// a dataset.Hetero (Load refuses them, naming LoadHetero):
//
//   - TypedNPY: nodes/<type>/ (features, labels and splits of the target,
//     num_nodes) and edges/<src>___<rel>___<dst>/ (edge_index, weights);
//   - OGBHetero: OGB's heterogeneous raw layout as ogbn-mag ships it
//     (num-node-dict, triplet-type-list, relations/<src>___<rel>___<dst>/,
//     node-feat/<type>/, node-label/<type>/, split/<name>/<type>/).
//
// Every parser bounds declared sizes by what the input actually holds
// before allocating, refuses input files that are not regular files (a
// FIFO would block forever), and reports malformed input as *ParseError
// naming the file and the line and column (text) or byte offset (binary),
// with at most a short escaped excerpt of the input; ParseError wraps
// dataset.ErrCorruption. Edges are coalesced (duplicates dropped, weights
// summed) and rows sorted, so the result is the same whatever the input
// order of duplicate edges and whatever the number of CPUs.
package importer
