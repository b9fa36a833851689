// Package train runs sampled mini-batch training of GCN, GraphSAGE and
// GAT node classifiers (NeighborSampler batches, Adam or SGD, evaluation
// of train/validation/test accuracy, progress bars, JSON reports,
// loss/accuracy plots and exactly resumable checkpoints), and holds what
// every trainer shares: the common settings (Common, embedded in Config
// and in package fullgraph's and dsp's configurations), the feature
// preparation (NewFeatures: row normalization, sparse storage), the
// evaluation and its scoring (Evaluator, Score, Tally), the report
// (Report, EpochRecord) and its plot. Whole-graph training, on one device
// or several, is package fullgraph's. RunHetero trains the typed models
// (rgcn, hsage) on typed datasets (dataset.Hetero) the same way: sampled
// mini-batches of target-type seeds, a fanout per relation, the same keying
// of every random choice, a Report with a hetero summary (HeteroReport);
// with Options.Replica a run is one data-parallel replica of several
// (dsp/engine's RunHetero runs one per device).
//
// # Determinism
//
// Every random choice is a pure function of the run's seed and a
// position: the model's initial weights of (seed), the shuffled order of
// the training nodes of (seed, epoch), a batch's sampled neighborhoods of
// sample.Key{seed, epoch, batch} and its dropout masks of
// (seed, epoch, batch) (Common.DropoutSeed; whole-graph training draws
// batch 0's). A batch's input dropout keeps the same elements whether its
// features are gathered sparse (bag-of-words, nn.ForwardSparseAsDense) or
// dense (a BatchSource), so the losses do not depend on the storage. The
// back ends are deterministic for any number of goroutines. So two runs
// with the same Config produce bit-identical losses, and a run resumed
// from a checkpoint taken after any batch continues exactly as if it had
// never stopped.
//
// # Precision
//
// Common.Precision (fp32, tf32, bf16; strata train --precision) must be
// the precision the back ends were opened with (ResolvePrecision; empty:
// theirs). At bf16 the trainers round the features to bfloat16
// (Features.Round) and keep dense ones as bfloat16 on the device, so a
// batch's gather reads half the bytes; weights and the optimizer stay
// float32, and bfloat16's float32 exponent range needs no loss scaling.
// precision.go has the policy, package backend's doc the design.
//
// # Evaluation
//
// After every EvalEvery-th epoch and after the last the model is
// evaluated without dropout. With Eval "full" (the default) every layer
// aggregates over all neighbors of the whole graph, also for models
// trained on sampled neighborhoods (full-neighbor inference), layer by
// layer in chunks within a memory budget (package infer): the logits of
// a one-pass forward over the whole graph; Eval "sampled" evaluates
// mini-batches with EvalFanouts.
// Accuracy on the training nodes comes from the same pass.
//
// # Model selection
//
// A Report gives validation and test accuracy of every evaluated epoch.
// Its headline test_accuracy is that of the epoch with the best
// validation accuracy (Select "best", the default; ties go to the lower
// validation loss, then the earlier epoch), as the GCN and GAT papers
// report; last_test_accuracy is that of the final epoch.
//
// # Saved models
//
// A Keeper (Options.Keep, and fullgraph's and dsp/engine's options) keeps
// a host copy of the parameters of the epoch the headline selects, for
// 'strata train --save' (package model writes them).
//
// # Checkpoints
//
// With CheckpointDir set, the trainer writes DIR/checkpoint.strata (see
// package train/checkpoint) every CheckpointEvery batches and at the end:
// parameters, optimizer moments and step, the seed, the cursor (epoch and
// next batch), the partial epoch's losses and the history of finished
// epochs. Resume continues from it.
package train
