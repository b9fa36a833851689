// Package gpurun is DSP training on GPUs: one process, one group of
// goroutines per device, the batches, model and reports of the host
// runner (dsp/runner) with the data on the devices.
//
// Per device:
//
//   - sampler: draws the device's batches on the GPU by collective
//     sampling over the device's patch of the topology (dsp/gpucsp: the
//     frontier goes to the owners of its nodes and the neighbors come
//     back, all over NCCL), or, with Sampler "full", by gpusample over
//     the whole graph on every device; both give the host sampler's
//     batches. With the layer scheme (runner.LayerWise) the collective
//     sampler is gpucsp.LayerSampler (csp.LayerSampler's batches; the
//     full sampler is node-wise and refuses it);
//   - loader: the partitioned feature cache of package gpucache: the
//     plan's hot rows in device memory, cold rows read from pinned host
//     memory through UVA, rows cached by peers fetched by all-to-all-v of
//     IDs and rows over NCCL;
//   - trainer: forward and backward on the CUDA back end into one flat
//     gradient buffer (every parameter's gradient is a view of it, the
//     step's loss its last element), mean all-reduce in buckets of
//     BucketBytes over NCCL, optimizer step. Losses stay on the device
//     until the epoch ends.
//
// The stages run concurrently on different batches, joined by bounded
// queues (dsp/pipeline), each with its own communicators (a device one,
// NCCL, and a host one for small headers), and every collective waits
// for its turn in the launch order of a comm.Coordinator, so stages of
// different devices never wait for each other's collectives in opposite
// orders. With NoPipeline the three run one after another per batch.
//
// Streams: the CUDA back end runs one stream per device handle, and its
// caching allocator relies on that (a block freed by the host is reused
// at once by later work on the same stream). So every GPU gets three
// handles of its own (cuda.Open of the same ordinal: the trainer's, the
// sampler's and the loader's), each with its own stream, lock and
// allocator, and each used by one stage only. The stages' GPU work
// overlaps, and no stage ever holds a device lock another stage needs
// while it waits in a collective (with shared handles, 4-GPU runs that
// exchanged features deadlocked). Blocks and features reach the trainer
// by device-to-device copies on its stream; their source buffers are
// freed two steps later, behind a fence. Stages wait for their streams
// with fences that do not hold the device lock. Config.SharedStream puts
// the sampler and the loader on the trainer's handle.
//
// BSP data parallelism: every device starts from the same weights (the
// single-device trainer's), runs the same number of batches per epoch
// (runner.AssignBatches: the same assignment as the host runner) and
// applies the same averaged gradient; replicas are checked equal bit for
// bit at the end. Device 0 evaluates as the single-device trainer does
// (every EvalEvery epochs and after the last).
//
// CPU back ends run the same code, the collective sampler included
// (gpucsp's CPU machine; Sampler "full" samples the whole graph with
// sample.NeighborSampler on each device), with a host feature table and
// device communicators staged over in-process ones; the tests use that.
package gpurun
