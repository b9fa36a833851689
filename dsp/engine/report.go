package engine

import (
	"fmt"

	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// Report is a run's result: the single-device trainer's report
// (accuracies, per-epoch losses of the evaluated epochs, config) plus the
// DSP settings, the pipeline metrics and the run's timings.
type Report struct {
	train.Report
	DSP     Info    `json:"dsp"`
	Metrics Metrics `json:"metrics"`
	Run     RunInfo `json:"device_run"`
	// World is the job's layout: machines, processes, ranks.
	World world.Info `json:"world"`
}

// Info describes the multi-device setup.
type Info struct {
	Devices int `json:"devices"`
	// Comm is the kind of the devices' communicators (Config.Comm
	// resolved; "none" on one device) and CommReason why it was chosen.
	Comm       string `json:"comm"`
	CommReason string `json:"comm_reason"`
	Scheme     string `json:"scheme"`
	Partition  string `json:"partition"`
	// EdgeCut is the partitioner's count of undirected edges between
	// patches (-1 when not partitioned); CrossEdges counts in-adjacency
	// entries whose source another device owns.
	EdgeCut     int64   `json:"edge_cut"`
	CrossEdges  int64   `json:"cross_edges"`
	Book        []int64 `json:"book"`
	CachePolicy string  `json:"cache_policy"` // as configured (auto included)
	CacheGroup  int     `json:"cache_group"`
	// CacheLayout is the plan's policy ("partition", or "replicate/G"
	// for groups of G devices): what auto chose.
	CacheLayout      string `json:"cache_layout,omitempty"`
	Hotness          string `json:"hotness"`
	QueueCapacity    int    `json:"queue_capacity"`
	Rebalance        string `json:"rebalance"`
	BatchesPerDevice int    `json:"batches_per_device"`
	DroppedSeeds     int    `json:"dropped_seeds"`
	Coordinated      bool   `json:"coordinated"`
	BucketBytes      int    `json:"bucket_bytes"`
	GradientBuckets  int    `json:"gradient_buckets"`
	RowNormalized    bool   `json:"row_normalized"`
	// SparseFeatures: under a quarter of the feature values are non-zero
	// (the devices keep the rows dense all the same: RunInfo.FeaturesDense).
	SparseFeatures bool         `json:"sparse_features"`
	PerDevice      []DeviceInfo `json:"per_device"`
}

// DeviceInfo describes one device's share.
type DeviceInfo struct {
	Rank                int    `json:"rank"`
	Backend             string `json:"backend"`
	Nodes               int    `json:"nodes"`
	Edges               int64  `json:"edges"`
	TopologyDeviceBytes int64  `json:"topology_device_bytes"`
	TopologyHostBytes   int64  `json:"topology_host_bytes"`
	CachedRows          int    `json:"cached_rows"`
	CacheBytes          int64  `json:"cache_bytes"`
	LocationTableBytes  int64  `json:"location_table_bytes"`
}

// RunInfo describes how the run ran and how long it took.
type RunInfo struct {
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
	// SetupSeconds is device 0's own setup (its placement).
	SetupSeconds float64 `json:"setup_seconds"`
	// FirstBatchSeconds is the time from the run's start (Options.Start:
	// strata train's process start; else Run's call) to the end of
	// device 0's first training step (on a GPU, whose steps run
	// asynchronously, the end of its launch), and SetupPhases what it
	// went to (SetupPhase). Both 0 and empty when no batch was trained.
	FirstBatchSeconds float64      `json:"first_batch_seconds"`
	SetupPhases       []SetupPhase `json:"setup_phases"`
	// PresampleSeconds is the wall time of the pre-sampling pass that
	// ranks the nodes for the cache (hotness presample; 0 otherwise): on
	// the GPUs with CUDA back ends, else on the host.
	PresampleSeconds float64 `json:"presample_seconds,omitempty"`
	ReplicasEqual    bool    `json:"replicas_equal"`
	// PeakDeviceBytes is each CUDA device's allocator peak (0 elsewhere).
	PeakDeviceBytes []int64 `json:"peak_device_bytes"`
	// OpProfiles: this process's devices' trainer ops over
	// Config.ProfileEpoch.
	OpProfiles []OpProfile `json:"op_profiles,omitempty"`
}

// Metrics are the pipeline's counters. Summary and Ranks are totals over
// the run (this process's work): all its devices' and every device's. Epochs
// holds each epoch's figures, those of the epoch's log line.
type Metrics struct {
	Summary metrics.Summary        `json:"summary"`
	Ranks   []metrics.RankSnapshot `json:"ranks"`
	Epochs  []EpochMetrics         `json:"epochs,omitempty"`
}

// EpochMetrics are one epoch's pipeline figures: every device's counters
// from the end of the previous epoch (or the start of the run) to the end
// of this one, as device 0's trainer finishes it, summarized as
// Metrics.Summary is. The stages of a pipeline overlap epochs: a sampler
// may already be working on the next one.
type EpochMetrics struct {
	Epoch int `json:"epoch"`
	metrics.Summary
}

// since summarizes the work between prev, an earlier snapshot of the same
// devices (zero: the start), and m.
func (m Metrics) since(prev Metrics) metrics.Summary {
	ranks := make([]metrics.RankSnapshot, len(m.Ranks))
	for i, r := range m.Ranks {
		var p metrics.RankSnapshot
		if i < len(prev.Ranks) {
			p = prev.Ranks[i]
		}
		ranks[i] = r.Since(p)
	}
	return metrics.Summarize(ranks)
}

// epochLog keeps the per-epoch figures of a run (device 0's trainer adds
// one at the end of every epoch; not for concurrent use).
type epochLog struct {
	last   Metrics
	epochs []EpochMetrics
}

// add records epoch's figures given the snapshot now and returns them.
func (l *epochLog) add(epoch int, now Metrics) EpochMetrics {
	e := EpochMetrics{Epoch: epoch, Summary: now.since(l.last)}
	l.last = now
	l.epochs = append(l.epochs, e)
	return e
}

// WriteJSON writes the report to path (indented JSON), atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("dsp: writing %s: %w", path, err)
	}
	return nil
}

// snapshot collects every device's counters and queues (this process's)
// and sums them.
func (s *shared) snapshot() Metrics {
	var m Metrics
	for _, r := range s.w.Ranks() {
		rs := s.ctrs[r].Snapshot(r)
		s.mu.Lock()
		for _, q := range s.queues[r] {
			rs.Queues = append(rs.Queues, q())
		}
		s.mu.Unlock()
		m.Ranks = append(m.Ranks, rs)
	}
	m.Summary = metrics.Summarize(m.Ranks)
	return m
}

// report assembles the run's report: orig is the dataset as loaded; the
// headline fields come from the best evaluated epoch by validation
// accuracy, or the last.
func (s *shared) report(orig *dataset.Dataset, device string) *Report {
	cfg := &s.cfg
	info := s.info
	info.CrossEdges = crossEdges(s.in, s.pd.book)
	var mine []DeviceInfo // this process's devices
	for _, r := range s.w.Ranks() {
		mine = append(mine, info.PerDevice[r])
	}
	info.PerDevice = mine
	m := s.snapshot()
	m.Epochs = s.epochs.epochs
	rep := &Report{DSP: info, Metrics: m, Run: s.run, World: s.w.Info()}
	rep.Report = *train.NewReport(orig, cfg.Train, fmt.Sprintf("%s x%d", device, cfg.Devices), info.RowNormalized)
	rep.Epochs = s.history
	rep.Summarize()
	if s.resumed != nil {
		rep.ResumedFrom = &train.Cursor{Epoch: s.firstEpoch()}
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
