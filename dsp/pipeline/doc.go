// Package pipeline holds the concurrency pieces of DSP's per-device
// pipeline: the sampler, loader and trainer of different mini-batches run
// at the same time, one goroutine each, joined by bounded queues.
//
//   - Queue: a bounded FIFO (capacity 2 by default, as in the DSP paper)
//     whose every wait has a deadline: a stage that waits too long for
//     input or for room fails with a *StallError naming the device, the
//     stage and the queue, instead of hanging. Queues record their
//     time-weighted occupancy.
//   - Comm wraps a stage's communicator: every collective waits for its
//     turn from a Launcher (comm.Coordinator, DSP's centralized
//     communication coordination: stages issue collectives concurrently,
//     each on its own communicator, and on GPUs two collectives launched in
//     different orders on two devices can deadlock, a kernel holding the
//     SMs while waiting for a peer that launched another one first; the
//     leader fixes one launch order that every device follows). It also
//     tells a tracker what the stage is blocked on, for stall diagnosis.
//     It wraps communicators of host and device buffers alike.
//   - Group runs a device's stages and cancels them all on the first
//     error.
//   - Hook is a test seam called at every stage step and before every
//     collective; RandomDelays injects random sleeps to look for deadlocks.
package pipeline
