// Package engine trains a GNN on several devices the way DSP does: one
// process, one group of goroutines per device, on GPUs (CUDA back ends,
// NCCL) or on CPU virtual devices (CPU back ends, in-process
// communicators) with the same code. It is the last piece of the reading
// order layout -> csp -> cache -> pipeline -> engine.
//
// Setup (run.go, setup.go): the graph is partitioned into one patch per
// device (multilevel k-way partitioning, renumbered so each patch owns a
// contiguous ID range), each device builds its patch of the topology
// (dsp/layout), the feature cache is planned (dsp/cache: the hotness
// ranking may come from a pre-sampling pass, presample.go) and every
// device sets up its stages.
//
// Per device, three stages run concurrently on different batches, joined
// by bounded queues (dsp/pipeline):
//
//   - sampler: draws the device's batches by collective sampling over
//     its patch (dsp/csp: the frontier goes to the owners of its nodes
//     and the neighbors come back; node-wise, or layer-wise with the
//     layer scheme), or, with Sampler "full", over the whole graph on
//     every device (gpusample on GPUs, this package's host samplers on
//     CPU back ends); both give the single-device sampler's batches.
//     With SamplerWorkers > 1 several samplers take turns;
//   - loader: the partitioned feature cache (dsp/cache): the plan's
//     hot rows in device memory, cold rows read from host memory (pinned,
//     through UVA on GPUs), rows cached by peers fetched by all-to-all-v
//     of IDs and rows;
//   - trainer: forward and backward into one flat gradient buffer (every
//     parameter's gradient is a view of it, the step's loss its last
//     element; its front is the model's own flat gradient buffer,
//     nn.ShareGrad), mean all-reduce in buckets of BucketBytes, optimizer
//     step (one Adam launch over the flat parameters), one fill to zero
//     it. The model's input dropout is applied by the loader while it
//     writes the rows (cache.Dropout), not by a pass of its own. Losses
//     stay on the device until the epoch ends.
//
// Each stage has its own communicators (one for its data, of the kind
// Config.Comm picks: NCCL on GPUs and in-process on CPU back ends by
// default, or gpushm, shm or tcp; and a host one for small headers), and
// every collective waits for its turn in the launch order of a
// comm.Coordinator, so stages of different devices never wait for each
// other's collectives in opposite orders. With NoPipeline the three run
// one after another per batch. A tracker notes what every stage does; a
// failed run's RunError names the stages that had been working too long
// (Stalled) and the log gets every stage's state.
//
// The GPU-only pieces live in package internal/cudadsp (the full
// sampler on a GPU, batches in device memory and their hand-over between
// a GPU's handles, deferred frees, the pre-sampling pass on GPUs, and
// the CUDA machines of csp and cache, which importing it registers);
// everything else runs on CPU devices too.
//
// Streams: the CUDA back end runs one stream per device handle, and its
// caching allocator relies on that (a block freed by the host is reused
// at once by later work on the same stream). So every GPU gets three
// handles of its own (backend.Siblings.Sibling: the trainer's, the
// sampler's and the loader's), each with its own stream, lock and
// allocator, and each used by one stage only. Blocks and features reach
// the trainer by device-to-device copies on its stream; their source
// buffers are freed two steps later, behind a fence. Config.SharedStream
// puts the sampler and the loader on the trainer's handle.
//
// Batches (batches.go): every epoch the training nodes are shuffled (the
// single-device trainer's order), each device takes the nodes it owns
// (DSP gives seeds to their owner), and the counts are balanced: "pad"
// (the default) uses every training node, splitting them into equal
// shares (+-1) and filling a missing last batch with one repeated node;
// "trim" is DSP's rebalance: every device gets the same whole number of
// full batches and the remainder is left out of that epoch. Batch i of
// device r uses the sampling key and dropout seed of global batch i*K+r.
//
// BSP data parallelism: every device starts from the same weights (the
// single-device trainer's), runs the same number of batches per epoch and
// applies the same averaged gradient; the replicas are checked equal bit
// for bit at the end. On one device a run is the single-device trainer's
// run given the same dense feature rows, loss for loss and accuracy for
// accuracy (the tests check it bit for bit). Device 0 evaluates as the
// single-device trainer does (train.Evaluator; every Train.EvalEvery epochs and after
// the last): the whole graph with all neighbors, or sampled mini-batches
// spread over every device.
//
// Tasks (task.go): Options.Task replaces node classification as the
// trainer's objective: it deals every epoch's batches (their seeds and
// its own work; Deal is the dealing assign uses; a TaskPreparer finishes
// each batch in the sampler stage, just before sampling it), edits sampled batches
// on the host when it needs to, computes the loss from the model's
// output rows of the seeds with parameters of its own (all-reduced with
// the model's) and is evaluated by device 0. Package link/multi's is
// link prediction.
//
// Typed models (hetero.go): RunHetero trains rgcn or hsage on a typed
// dataset without this pipeline: one copy of train's typed trainer per
// device (train.Replica: the same Loop and step), each epoch's training
// nodes dealt by Deal (pad) over equal ID ranges of the target type,
// batches drawn by the collective typed sampler (csp.TypedSampler) over
// equal ID ranges of every node type, one mean all-reduce of a flat
// gradient buffer (and the loss) per step through a communicator of
// Config.Comm's kinds, device 0 evaluating, the replicas checked equal
// at the end.
//
// Features are row-normalized as the single-device trainer does and kept
// dense on every device (the report says whether they count as sparse).
//
// The Report extends train.Report with the DSP settings (Info), the
// pipeline metrics (stage times, queue occupancy, bytes per link, cache
// hits, per epoch and in total) and the run's timings (RunInfo).
//
// Checkpoints (checkpoint.go): with Options.CheckpointDir device 0
// writes the run's state after every epoch, and Options.Resume continues
// from it with the numbers of an uninterrupted run. Checkpoints of the
// removed host engine are refused.
//
// Several processes (Options.World, comm/world): the devices of every
// process of a job are its ranks; each process runs Run with its own
// devices and builds only their patches, caches and replicas, and every
// communicator (the coordinator's control group, each stage's host and
// device groups: openComms) spans the job with this process's devices as
// its local members. Over TCP the float sums are taken in rank order, so
// a job's numbers equal one process's with every device. Rank 0 logs,
// evaluates, checkpoints (recording the layout; every process writes its
// own state file) and reports (Report.World). A failure names the
// processes behind it (world.Explain). See docs/distributed.md.
package engine
