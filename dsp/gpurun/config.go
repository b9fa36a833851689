package gpurun

import (
	"fmt"
	"io"

	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Config is a run: the host runner's configuration (model, schedule,
// partitioning, cache, queues, rebalancing, bucket size, timeouts) plus
// the device-side switches.
type Config struct {
	runner.Config
	// NoPipeline runs each device's sampler, loader and trainer one after
	// another for every batch, in one goroutine (the pipeline turned off,
	// for comparison). The numbers do not change.
	NoPipeline bool `json:"no_pipeline"`
	// EvalEvery makes device 0 evaluate after every EvalEvery-th epoch
	// and after the last one (0 means 1; negative: after the last only).
	EvalEvery int `json:"eval_every"`
	// Sampler is how devices sample: SamplerCSP (default: collective
	// sampling over each device's patch, dsp/gpucsp, on GPUs and CPU back
	// ends alike; node-wise or layer-wise as Scheme says) or SamplerFull
	// (every device samples the whole graph: gpusample on GPUs,
	// sample.NeighborSampler on CPU back ends; the same batches;
	// node-wise only).
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

// Samplers.
const (
	SamplerCSP  = "csp"
	SamplerFull = "full"
)

// Defaults returns the single-device defaults of model on k devices, with
// a feature cache large enough for every row.
func Defaults(model string, k int) Config {
	return Config{Config: runner.Defaults(model, k)}
}

// Options are the run's environment.
type Options struct {
	// Backends are the devices, one per rank, all CUDA devices (GPUs:
	// device sampling, NCCL) or all of other kinds (CPU back ends: host
	// sampling, device communicators staged over in-process ones).
	Backends []backend.Backend
	// CheckpointDir, when set, makes device 0 write the run's state to
	// DIR/checkpoint.strata after every epoch (atomically). An existing
	// checkpoint is an error unless Resume is set, in which case the run
	// continues after its last epoch, with the same numbers as an
	// uninterrupted run.
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
}

// normalize fills defaults and checks what the device run supports.
func (c *Config) normalize() error {
	if err := c.Config.Normalize(); err != nil {
		return err
	}
	bad := func(field, format string, args ...any) error {
		return &runner.ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if c.EvalEvery == 0 {
		c.EvalEvery = 1
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
	if c.Scheme == runner.LayerWise && c.Sampler == SamplerFull {
		// Layer-wise batches come from gpucsp.LayerSampler.
		return bad("sampler", "the full sampler is node-wise sampling over the whole graph; layer-wise sampling is collective (use csp)")
	}
	return nil
}

// evaluates reports whether device 0 evaluates after epoch e (0-based).
func (c *Config) evaluates(e int) bool {
	if e == c.Train.Epochs-1 {
		return true
	}
	return c.EvalEvery > 0 && (e+1)%c.EvalEvery == 0
}
