// Package pipeline holds the concurrency pieces of DSP's per-device
// pipeline: the sampler, loader and trainer of different mini-batches run
// at the same time, one goroutine each, joined by bounded queues.
//
//   - Queue: a bounded FIFO (capacity 2 by default, as in the DSP paper)
//     whose every wait has a deadline: a stage that waits too long for
//     input or for room fails with a *StallError naming the device, the
//     stage and the queue, instead of hanging. Queues record their
//     time-weighted occupancy.
//   - Coordinator: DSP's centralized communication coordination. Stages
//     issue collectives concurrently, each on its own communicator; on
//     GPUs, two collectives launched in different orders on two devices can
//     deadlock (a kernel holds the SMs while waiting for a peer that
//     launched another one first). The leader (rank 0) fixes one launch
//     order: each stage registers the collective it is about to issue, the
//     leader's registrations form the sequence, and every device launches
//     its collectives in that sequence, one at a time. Comm wraps a
//     comm.Comm so every collective goes through the coordinator.
//   - Group runs a device's stages and cancels them all on the first
//     error.
//   - Hook is a test seam called at every stage step and before every
//     collective; RandomDelays injects random sleeps to look for deadlocks.
//
// The Coordinator works for devices of one process (goroutine ranks, or
// GPUs driven by one process); devices in separate processes would carry
// the leader's sequence over a control channel instead.
package pipeline
