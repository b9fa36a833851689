package engine

import (
	"fmt"
	"github.com/strata-gnn/strata/infer"
	"io"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/machines"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Sampling schemes.
const (
	NodeWise  = "node"
	LayerWise = "layer"
)

// Partitioning methods.
const (
	// Multilevel partitions with package partition and renumbers the
	// nodes (the default with several devices).
	Multilevel = "multilevel"
	// METIS is Multilevel with libmetis.
	METIS = "metis"
	// Range splits the existing node IDs into equal contiguous ranges
	// (no partitioning, no renumbering).
	Range = "range"
)

// Rebalancing modes.
const (
	Pad  = "pad"
	Trim = "trim"
)

// Samplers.
const (
	// SamplerCSP is collective sampling over each device's patch
	// (dsp/csp), on GPUs and CPU back ends alike.
	SamplerCSP = "csp"
	// SamplerFull makes every device sample the whole graph alone: the
	// same batches. On GPUs gpusample, node-wise only; on CPU back ends
	// sample.NeighborSampler, or layer-wise csp.LayerSampler on one
	// rank.
	SamplerFull = "full"
)

// CommKinds are the values of Config.Comm.
var CommKinds = []string{comm.KindAuto, comm.KindNCCL, comm.KindGPUShm, comm.KindShm, comm.KindTCP}

// MaxSamplerWorkers bounds Config.SamplerWorkers.
const MaxSamplerWorkers = 8

// MaxQueueCapacity bounds Config.QueueCapacity.
const MaxQueueCapacity = 1024

// maxDevices bounds Config.Devices.
const maxDevices = 1 << 10

// Config describes a run. The JSON field names are those of the
// checkpoints' configuration (ckptMeta.Config).
type Config struct {
	// Train is the model, optimizer and schedule, as for the single-device
	// trainer. Mode must be "sampled". Device 0 evaluates (Eval "full":
	// the whole graph; "sampled": mini-batches, spread over the devices).
	Train train.Config `json:"train"`
	// Devices is the number of devices (ranks).
	Devices int `json:"devices"`
	// Scheme is NodeWise (default) or LayerWise; for LayerWise,
	// Train.Fanouts are the edges drawn per layer.
	Scheme string `json:"scheme"`
	// Replace and Weighted select the sampling variant (default uniform
	// without replacement, the single-device trainer's).
	Replace  bool `json:"replace"`
	Weighted bool `json:"weighted"`
	// Partition is Multilevel (default), METIS or Range.
	Partition string `json:"partition"`
	// TopologyBytes is each device's budget for its patch's rows; the rest
	// stays in host memory. 0 or negative: no limit.
	TopologyBytes int64 `json:"topology_bytes"`
	// CacheBytes is each device's budget for cached feature rows (0: every
	// row comes from host memory; negative: room for every row).
	CacheBytes  int64         `json:"cache_bytes"`
	CachePolicy cache.Policy  `json:"cache_policy"` // partition (default) | replicate | auto
	CacheGroup  int           `json:"cache_group"`  // replicate: devices per copy
	Hotness     cache.Hotness `json:"hotness"`      // in-degree (default) | pagerank | reverse-pagerank | presample
	// QueueCapacity bounds each queue between stages (default 2).
	QueueCapacity int `json:"queue_capacity"`
	// Rebalance is Pad (default) or Trim.
	Rebalance string `json:"rebalance"`
	// NoCoordinator lets the stages issue collectives without the
	// launch-order coordinator (comm.Coordinator). That is safe with
	// in-process communicators; GPUs need the coordinator.
	NoCoordinator bool `json:"no_coordinator"`
	// BucketBytes is the size of the gradient buckets all-reduced at once
	// (default 10 MiB, as MegEngine's ParamPack).
	BucketBytes int `json:"bucket_bytes"`
	// WaitTimeout bounds every wait of a stage: for a queue, for its turn
	// to launch a collective (default 10 minutes: it must exceed the
	// longest legitimate wait, device 0's evaluation after an epoch).
	// CommTimeout bounds each collective (default 5 minutes). In a job
	// of several processes a stage waits up to WaitTimeout+CommTimeout,
	// so that a collective's failure, naming the process missing, comes
	// first.
	WaitTimeout time.Duration `json:"wait_timeout"`
	CommTimeout time.Duration `json:"comm_timeout"`
	// NoPipeline runs each device's sampler, loader and trainer one after
	// another for every batch, in one goroutine (the pipeline turned off,
	// for comparison). The numbers do not change.
	NoPipeline bool `json:"no_pipeline"`
	// SyncCollectives makes the NCCL collectives of GPUs wait for their
	// completion instead of returning once queued (nccl.Options.Async;
	// for comparison). NoStagePriority gives the samplers' and loaders'
	// streams of GPUs the default priority instead of the highest (for
	// comparison). Neither changes a number, nor anything on CPU back
	// ends.
	SyncCollectives bool `json:"sync_collectives"`
	NoStagePriority bool `json:"no_stage_priority"`
	// ProfileEpoch, when positive, times every op of each device's
	// trainer during that epoch (1-based) with the back end's Profiler
	// (CUDA devices) and reports them (RunInfo.OpProfiles). The timing
	// slows that epoch; no number changes.
	ProfileEpoch int `json:"profile_epoch,omitempty"`
	// Comm is how the devices' collectives move data (the gradient
	// all-reduce, the feature rows and the collective sampler's
	// exchanges): comm.KindAuto (the default: NCCL on CUDA devices,
	// in-process on other back ends), comm.KindNCCL (CUDA devices),
	// comm.KindGPUShm (the GPU shared-memory all-reduce, package
	// comm/gpushm; its host pipeline on CPU back ends), comm.KindShm or
	// comm.KindTCP (host collectives in this process; GPU buffers staged
	// through host memory). Headers and control messages always use
	// in-process communicators. Float sums are added in rank order
	// (bit-identical across these kinds) except by tcp (ring order) and
	// NCCL, whose sums differ in the last bits; a resume may use another
	// kind.
	Comm string `json:"comm,omitempty"`
	// Sampler is SamplerCSP (default) or SamplerFull.
	Sampler string `json:"sampler"`
	// SharedStream runs a CUDA device's sampler on the trainer's stream
	// (the back end's one stream per device handle) instead of on a
	// second handle of the same GPU with its own stream; the numbers do
	// not change.
	SharedStream bool `json:"shared_stream"`
	// SamplerWorkers is the number of samplers per device (0 means 1, at
	// most MaxSamplerWorkers): worker w draws the device's batches w,
	// w+N, w+2N, ... of the run (N workers), and the loader takes them
	// in order. On CUDA devices each worker has its own stream and
	// communicators and reads the first one's topology in place
	// (layer-wise sampling: its own copy), so one worker samples while
	// another waits for its peers' headers. The numbers do not change.
	// Needs the pipeline and the samplers' own streams.
	SamplerWorkers int `json:"sampler_workers"`
}

// Defaults returns the single-device defaults of model on k devices, with
// a feature cache large enough for every row.
func Defaults(model string, k int) Config {
	return Config{Train: train.Defaults(model), Devices: k, CacheBytes: -1}
}

// Options are the run's environment; none of them changes its numbers.
type Options struct {
	// Backends are the devices, one per rank: all CUDA devices (GPUs:
	// device sampling, NCCL by default) or all of other kinds (CPU back
	// ends, "CPU virtual devices": the same code, with in-process
	// communicators by default). Each device must be its own instance.
	// With World they are this process's devices: its ranks
	// World.Ranks().
	Backends []backend.Backend
	// World, when set, is the job this process is part of (comm/world):
	// Config.Devices is then the job's ranks, every process runs Run
	// with its own devices, and the communicators span the processes.
	// Rank 0 (process 0) evaluates, logs, checkpoints and reports; the
	// others' reports hold their own devices' metrics. Nil: this process
	// owns every rank.
	World *world.World
	// Machine, when set, is this process's machine directory (package
	// dsp/machines, `strata partition --machines`): the run's
	// partition is the directory's, ds passed to Run is its dataset
	// (no features), the machine's rows come from its shard and the
	// others' from their machines' feature services (machines.go;
	// cache.ShardStore, on CPU devices and GPUs).
	Machine *machines.Dir
	// RemoteCacheBytes is the budget of this process's cache of other
	// machines' rows (0: none); RemoteTimeout each request's deadline
	// (default machines.DefaultTimeout). Neither changes a number.
	RemoteCacheBytes int64
	RemoteTimeout    time.Duration
	// CheckpointDir, when set, makes device 0 write the run's state to
	// DIR/checkpoint.strata after every epoch (atomically). An existing
	// checkpoint is a *CheckpointError unless Resume is set, in which
	// case the run continues after its last epoch, with the same numbers
	// as an uninterrupted run.
	CheckpointDir string
	Resume        bool
	// Log receives the per-epoch lines.
	Log io.Writer
	// OnBatch, when set, is called by every device after each step with
	// the step's loss averaged over devices (it reads the loss at every
	// step, which costs a synchronization).
	OnBatch func(rank, epoch, batch int, loss float64)
	// Hook is the test seam of package pipeline (stage steps and
	// collectives).
	Hook pipeline.Hook
	// GPUShm tunes the communicators of Config.Comm gpushm (strata
	// train's --gpushm-* flags); its comm.Options are replaced by
	// Config.CommTimeout.
	GPUShm gpushm.Options
	// Keep, when set, keeps the parameters of the epoch a saved model
	// holds (device 0's, as it records each epoch).
	Keep *train.Keeper
	// Task, when set, replaces node classification as the objective
	// (task.go; link prediction: package link/multi): the dataset then
	// needs no labels or node splits, and checkpoints and Keep are not
	// taken.
	Task Task
	// Start is when the run started, for RunInfo.FirstBatchSeconds
	// (strata train gives its process's start); zero: when Run is
	// called. Phases are the setup phases the caller timed before Run
	// (opening the devices and the dataset), reported first.
	Start  time.Time
	Phases []SetupPhase

	// unfused (tests only) runs the step as before issue 19's engine
	// work: the model drops its input out itself, and the gradients are
	// repointed per parameter (Adam steps each tensor), to compare
	// losses and count launches against.
	unfused bool
	// noWarm (tests only) starts the pipeline without the products'
	// warm-up (device.warm), to check that it changes no result.
	noWarm bool
	// halfConvert (tests only) runs a bf16 step with bfloat16
	// activations as before issue 19's second pass: the loader returns
	// float32 rows that the model converts, and the tape converts each
	// weight on its own; losses are compared against it.
	halfConvert bool
	// noEvalTable (tests only) makes the whole-graph evaluation upload
	// the features as before issue 15 instead of reading the feature
	// stores' tables; evalInputs hears what each evaluation is given.
	noEvalTable bool
	evalInputs  func([]backend.Buffer)
	// noEvalShards (tests only) keeps the whole-graph evaluation from
	// reading a partitioned cache's rows (evalShards); evalShardsSeen
	// hears what each evaluation is given.
	noEvalShards   bool
	evalShardsSeen func(*infer.Shards)
}

// ConfigError reports an invalid field.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "dsp: config " + e.Field + ": " + e.Msg }

// Normalize fills the defaults and validates, as Run does.
func (c *Config) Normalize() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if err := c.Train.Validate(); err != nil {
		return err
	}
	if c.Train.Mode != train.Sampled {
		return bad("mode", "multi-device training is sampled mini-batch training, not %q", c.Train.Mode)
	}
	if c.ProfileEpoch < 0 || c.ProfileEpoch > c.Train.Epochs {
		return bad("profile_epoch", "%d not in [0, %d] (0: off; else an epoch of the run)", c.ProfileEpoch, c.Train.Epochs)
	}
	if c.Devices < 1 || c.Devices > maxDevices {
		return bad("devices", "%d not in [1, %d]", c.Devices, maxDevices)
	}
	switch c.Scheme {
	case "":
		c.Scheme = NodeWise
	case NodeWise, LayerWise:
	default:
		return bad("scheme", "unknown scheme %q (want node or layer)", c.Scheme)
	}
	if c.Scheme == LayerWise && c.Weighted && !c.Replace {
		return bad("weighted", "weighted layer-wise sampling is with replacement only")
	}
	switch c.Partition {
	case "":
		c.Partition = Multilevel
	case Multilevel, METIS, Range:
	default:
		return bad("partition", "unknown method %q (want multilevel, metis or range)", c.Partition)
	}
	if c.CachePolicy == "" {
		c.CachePolicy = cache.Partition
	}
	if _, err := cache.ParsePolicy(string(c.CachePolicy)); err != nil {
		return bad("cache_policy", "%v", err)
	}
	if c.CachePolicy == cache.Replicate && c.CacheGroup == 0 {
		c.CacheGroup = 1
	}
	switch {
	case c.CachePolicy == cache.Replicate && (c.CacheGroup < 1 || c.Devices%c.CacheGroup != 0):
		return bad("cache_group", "%d does not divide %d devices", c.CacheGroup, c.Devices)
	case c.CachePolicy == cache.Auto && c.CacheGroup != 0:
		return bad("cache_group", "the auto policy chooses the group (got %d)", c.CacheGroup)
	case c.CachePolicy == cache.Partition && c.CacheGroup != 0 && c.CacheGroup != c.Devices:
		return bad("cache_group", "the partition policy spans all devices")
	}
	h, err := cache.ParseHotness(string(c.Hotness))
	if err != nil {
		return bad("hotness", "%v", err)
	}
	c.Hotness = h
	if c.QueueCapacity == 0 {
		c.QueueCapacity = 2
	}
	if c.QueueCapacity < 1 || c.QueueCapacity > MaxQueueCapacity {
		return bad("queue_capacity", "%d not in [1, %d]", c.QueueCapacity, MaxQueueCapacity)
	}
	switch c.Rebalance {
	case "":
		c.Rebalance = Pad
	case Pad, Trim:
	default:
		return bad("rebalance", "unknown mode %q (want pad or trim)", c.Rebalance)
	}
	if c.BucketBytes == 0 {
		c.BucketBytes = 10 << 20
	}
	if c.BucketBytes < 4 {
		return bad("bucket_bytes", "%d < 4", c.BucketBytes)
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = 10 * time.Minute
	}
	if c.CommTimeout == 0 {
		c.CommTimeout = 5 * time.Minute
	}
	if c.WaitTimeout < 0 || c.CommTimeout < 0 {
		return bad("wait_timeout", "timeouts must be positive")
	}
	switch c.Comm {
	case "":
		c.Comm = comm.KindAuto
	case comm.KindAuto, comm.KindNCCL, comm.KindGPUShm, comm.KindShm, comm.KindTCP:
	default:
		return bad("comm", "unknown kind %q (want %s)", c.Comm, strings.Join(CommKinds, ", "))
	}
	switch c.Sampler {
	case "":
		c.Sampler = SamplerCSP
	case SamplerCSP, SamplerFull:
	default:
		return bad("sampler", "unknown sampler %q (want csp or full)", c.Sampler)
	}
	switch w := c.SamplerWorkers; {
	case w == 0:
		c.SamplerWorkers = 1
	case w < 0 || w > MaxSamplerWorkers:
		return bad("sampler_workers", "%d sampler workers: want 1 to %d", w, MaxSamplerWorkers)
	case w > 1 && c.NoPipeline:
		return bad("sampler_workers", "%d sampler workers need the pipeline (no_pipeline runs one sampler)", w)
	case w > 1 && c.SharedStream:
		return bad("sampler_workers", "%d sampler workers need their own streams (not shared_stream)", w)
	}
	return nil
}

// Diff names the first setting of c that differs from o's and would
// change a run's numbers ("" if none): the training configuration
// (train.Config.Diff: epochs may differ), the devices, partitioning,
// sampling scheme and rebalancing. Caches, hotness, queues, buckets, the
// coordinator, timeouts, the pipeline, the sampler and its workers move
// work around without changing a number; the communication back end
// (Comm) changes at most the last bits of the gradient sums.
func (c *Config) Diff(o *Config) string {
	if d := c.Train.Diff(&o.Train); d != "" {
		return d
	}
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"devices", c.Devices, o.Devices}, {"partition", c.Partition, o.Partition}, {"scheme", c.Scheme, o.Scheme},
		{"replace", c.Replace, o.Replace}, {"weighted", c.Weighted, o.Weighted}, {"rebalance", c.Rebalance, o.Rebalance},
	} {
		if f.x != f.y {
			return fmt.Sprintf("%s is %v, the checkpoint has %v", f.name, f.x, f.y)
		}
	}
	return ""
}
