// Package runner trains a GNN on several devices the way DSP does.
//
// Setup: the graph is partitioned into one patch per device (multilevel
// k-way partitioning, renumbered so each patch owns a contiguous ID
// range), each device builds its patch (package layout), the feature
// cache is planned (package cache; the hotness ranking may come from a
// pre-sampling pass) and every device uploads its cached rows.
//
// Training: every device runs three stages, one goroutine each, joined by
// bounded queues (package pipeline): the sampler draws the device's
// batches with collective sampling (package csp), the loader fetches their
// input features from the partitioned cache, and the trainer runs forward
// and backward on its own back end, all-reduces the gradients (mean, in
// buckets of BucketBytes) and steps its optimizer. Each stage has its own
// communicator, and the launch-order coordinator orders their collectives.
// It is BSP data parallelism: every device starts from the same weights,
// runs the same number of batches per epoch and applies the same averaged
// gradient, so the replicas stay identical (checked at the end).
//
// Batches: every epoch the training nodes are shuffled (the same order as
// the single-device trainer), each device takes the nodes it owns (DSP
// gives seeds to their owner), and the counts are balanced: "pad" (the
// default) uses every training node, splitting them into equal shares
// (+-1) and filling a missing last batch with one repeated node; "trim"
// is DSP's rebalance: every device gets the same whole number of full
// batches and the remainder is left out of that epoch. Batch i of device r
// uses the sampling key and dropout seed of global batch i*K+r, so on one
// device a run is the single-device trainer's run, loss for loss.
//
// After every epoch device 0 evaluates the model as the single-device
// trainer does (Eval "full": the whole graph with all neighbors; "sampled":
// mini-batches of the evaluation nodes drawn on the host) and the run logs
// the losses, accuracies and the pipeline metrics. The Report extends train.Report with the DSP settings and the
// metrics (stage times, queue occupancy, bytes per link, cache hit rate).
//
// Checkpoints: with Options.CheckpointDir device 0 writes the run's state
// after every epoch (package dsp/internal/ckpt, shared with dsp/gpurun),
// and Options.Resume continues from it with the numbers of an
// uninterrupted run.
package runner
