// Package ckpt is the checkpoint of a DSP run (package dsp/engine).
//
// After every epoch device 0 writes DIR/checkpoint.strata in package
// train/checkpoint's format (a temporary file, synced and renamed): the
// model parameters and the optimizer state, which every device holds
// identically under BSP, the number of epochs done and the report's
// history so far (metadata format Format). Every random stream of a run
// (batch order, sampling, dropout) is a pure function of the seed, the
// epoch and the batch, so that is the whole state: a run resumed from it
// produces the numbers of an uninterrupted one.
//
// Open checks a checkpoint against the run before anything is loaded:
// the format, the engine that wrote it (the host engine's checkpoints,
// from before the host engine was removed, are refused with a message
// saying so), every setting that changes the
// numbers (the first difference is named), the dataset's fingerprint,
// the schedule (a finished one is refused) and the tensors' shapes. It
// also refuses to let a run that does not resume overwrite a checkpoint.
package ckpt
