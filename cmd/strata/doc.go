// Command strata trains graph neural networks and prepares their data.
//
//	strata train [flags]          train GCN, GraphSAGE or GAT (default: sampled
//	                              GraphSAGE on the built-in Cora)
//	strata predict --model DIR    logits of a model saved by train --save (.npy);
//	                              a link model's pair scores (--pairs)
//	strata embed --model DIR      a layer's hidden representations (.npy)
//	strata evaluate --model DIR   a saved model's accuracies (a link model's
//	                              AUC, MRR and Hits@K)
//	strata import SRC DST         convert a dataset into Strata's format
//	strata import --edges F DST   import CSV/Parquet edge (and --nodes) tables
//	strata split DIR [flags]      make seeded node and edge splits
//	strata gen DST [flags]        generate a synthetic dataset
//	strata info [DIR|NAME]        show back ends and devices; summarize a dataset
//
// Global flags: --quiet (no progress bars or per-epoch lines) and
// --config FILE, a YAML mapping of the subcommand's flag names to values
// (flags given on the command line win; unknown keys are errors naming the
// key and its line). --device auto picks a registered accelerator that
// opens (cuda) and falls back to cpu; naming a device that cannot be
// opened is an error.
//
// Exit status: 0 on success, 1 when the work failed, 2 for usage errors
// (bad flags, config files or device names).
//
// docs/training.md is the full reference.
package main
