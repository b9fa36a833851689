package fullgraph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/strata-gnn/strata/comm/world"
	"os"

	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// Report is the result of a run, written as JSON by --report: the report
// of every trainer (train.Report: accuracies, the headline selection,
// per-epoch losses and evaluations) with the whole configuration, the
// devices, partitioning, memory and communication. Its Config shadows
// train.Report's: "config" in the JSON is the Config the run was given;
// the embedded report's Config holds its common part (Mode train.Full),
// for code written for train.Report (plots).
type Report struct {
	train.Report
	Config       Config         `json:"config"`
	Engine       string         `json:"engine"`             // "distributed" or "tape"
	Devices      []string       `json:"devices"`            // one per rank
	EpochSeconds float64        `json:"mean_epoch_seconds"` // training only, without evaluation
	Partition    PartitionStats `json:"partition"`
	Memory       MemoryStats    `json:"memory"`
	Comm         CommStats      `json:"comm"`
	// EpochComm is every epoch's share of Comm.
	EpochComm []EpochComm `json:"epoch_comm"`
	// World is the job's layout (machines, processes, ranks); Devices
	// and Memory are this process's devices'.
	World world.Info `json:"world"`
}

// MemoryStats is measured by counting the bytes of every buffer and
// sparse matrix the run allocates on each device (parameters, optimizer
// moments, features, graph, activations, caches, temporaries).
type MemoryStats struct {
	// ActivationBytes[l] is what layer l's forward pass keeps for the
	// backward pass during training (inputs after dropout and masks,
	// projections, aggregations, outputs); the largest over the devices.
	ActivationBytes []int64 `json:"activation_bytes_per_layer"`
	// PeakBytes is the most bytes live at once on each device.
	PeakBytes []int64 `json:"peak_bytes"`
	// CacheBytes are the historical embedding (and gradient) copies of
	// each device at the end of the run.
	CacheBytes []int64 `json:"cache_bytes"`
	// GraphBytes are the CSR structures on each device.
	GraphBytes []int64 `json:"graph_bytes"`
}

// summarize fills the headline fields (train.Report.Summarize) and the
// mean training time of an epoch.
func (r *Report) summarize() {
	r.Report.Summarize()
	var train float64
	for _, e := range r.Epochs {
		train += e.Seconds - e.EvalSeconds
	}
	if len(r.Epochs) > 0 {
		r.EpochSeconds = train / float64(len(r.Epochs))
	}
}

// WriteJSON writes the report to path (indented), replacing the file
// atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("fullgraph: writing %s: %w", path, err)
	}
	return nil
}

// ReadReport reads a report written by WriteJSON; unknown fields are an
// error.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("fullgraph: report %s: %w", path, err)
	}
	if r.Schema != train.ReportVersion {
		return nil, fmt.Errorf("fullgraph: report %s: schema %d, this build reads %d", path, r.Schema, train.ReportVersion)
	}
	r.Report.Config = r.Config.trainConfig()
	return &r, nil
}
