// Package split makes seeded train/validation/test splits of a dataset's
// nodes (random or stratified by class) and of its edges (for link
// prediction), and stores edge splits next to a dataset in the documented
// edge_split/ layout (docs/dataset-format.md, "Edge splits").
//
// Every split is a pure function of the dataset, the fractions and the
// seed: permutations come from the counter-based generator in
// internal/rng, drawn in one fixed order, so the result does not depend on
// the number of goroutines or CPUs.
//
//	train, val, test, err := split.Nodes(d.Labels, split.Fractions{0.6, 0.2, 0.2}, seed, true)
//	es, err := split.Edges(d, split.Fractions{0.85, 0.05, 0.10}, seed)
//	err = es.WriteDir(filepath.Join(dir, split.EdgeSplitDir))
//	es, err = split.ReadEdges(dir, d) // checks it was made for d's graph
//
// Edge splits follow PyG's RandomLinkSplit: on an undirected dataset each
// undirected edge {u, v} (u < v) is drawn once and a held-out edge leaves
// the message-passing graph in both directions; self-loops are never held
// out. The files list positive edges only: negative edges are the
// trainer's to draw.
package split
