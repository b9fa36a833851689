package gpurun

import (
	"fmt"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/runner"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// Report is the host runner's report (accuracies, per-epoch losses of the
// evaluated epochs, DSP settings, pipeline metrics) plus the device run's
// timings.
type Report struct {
	runner.Report
	Run Info `json:"device_run"`
}

// Info describes the device run.
type Info struct {
	Pipeline bool   `json:"pipeline"`
	Sampler  string `json:"sampler"`
	// SamplerWorkers is the number of samplers per device.
	SamplerWorkers int `json:"sampler_workers"`
	// SamplerStream: CUDA samplers ran on their own stream (a second
	// device handle), their blocks copied to the trainer's.
	SamplerStream bool `json:"sampler_stream"`
	// StagePriority is the samplers' and loaders' stream priority (0:
	// the default; negative: higher than the trainers').
	StagePriority int `json:"stage_stream_priority"`
	// AsyncCollectives: NCCL collectives returned once queued.
	AsyncCollectives bool `json:"async_collectives"`
	// Exchange: devices serve each other feature rows (all-to-all-v).
	Exchange      bool `json:"feature_exchange"`
	FeaturesDense bool `json:"features_dense"`
	EvalEvery     int  `json:"eval_every"`
	// Per epoch: device 0's training time (first step's start, or the
	// end of the previous epoch's evaluation, to the last step's end,
	// evaluation excluded), mean loss and evaluation time (0: none).
	EpochTrainSeconds []float64 `json:"epoch_train_seconds"`
	EpochLosses       []float64 `json:"epoch_losses"`
	EvalSeconds       []float64 `json:"eval_seconds"`
	// SteadyEpochSeconds is the mean training time of the epochs after
	// the first (the first's with one epoch).
	SteadyEpochSeconds float64 `json:"steady_epoch_seconds"`
	SetupSeconds       float64 `json:"setup_seconds"`
	// PresampleSeconds is the wall time of the pre-sampling pass that
	// ranks the nodes for the cache (hotness presample; 0 otherwise): on
	// the GPUs with CUDA back ends, else on the host.
	PresampleSeconds float64 `json:"presample_seconds,omitempty"`
	ReplicasEqual    bool    `json:"replicas_equal"`
	// PeakDeviceBytes is each CUDA device's allocator peak (0 elsewhere).
	PeakDeviceBytes []int64 `json:"peak_device_bytes"`
}

// WriteJSON writes the report to path (indented JSON), atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("dsp/gpurun: writing %s: %w", path, err)
	}
	return nil
}

// snapshot collects every device's metrics.
func (s *shared) snapshot() runner.Metrics { return runner.CollectMetrics(s.ctrs, s.queues, &s.mu) }

// report assembles the run's report.
func (s *shared) report(orig *dataset.Dataset, device string) *Report {
	info := s.info
	info.CrossEdges = runner.CrossEdges(s.in, s.pd.Book)
	m := s.snapshot()
	m.Epochs = s.epochs.Epochs()
	rep := &Report{Report: *runner.NewReport(orig, s.pd.Dataset, &s.cfg.Config, device, info, s.history, m), Run: s.gpu}
	if s.resumed != nil {
		rep.ResumedFrom = &train.Cursor{Epoch: s.resumeEpoch()}
	}
	if e := rep.Run.EpochTrainSeconds; len(e) == 1 {
		rep.Run.SteadyEpochSeconds = e[0]
	} else if len(e) > 1 {
		var t float64
		for _, x := range e[1:] {
			t += x
		}
		rep.Run.SteadyEpochSeconds = t / float64(len(e)-1)
	}
	return rep
}
