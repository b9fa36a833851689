// Package gputrain connects package train to a CUDA device. New returns a
// train.NewBatchSource whose batches are sampled on the GPU
// (sample/gpusample, the same draws as sample.NeighborSampler) with input
// features gathered from a GPU feature store (package feature: hot rows in
// device memory, the rest read from pinned host memory), and handed to
// nn without a host copy (gpusample.Batch.NNBlocks). The next batch's
// sampling is queued ahead of the current step, so the GPU never waits
// for the host between steps.
//
// strata train installs it when --device names a CUDA device.
package gputrain
