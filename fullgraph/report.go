package fullgraph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// ReportVersion is the schema version of Report's JSON.
const ReportVersion = 1

// Mode is the training mode name in reports and on the command line.
const Mode = "fullgraph"

// Report is the result of a run, written as JSON by --report. The
// headline accuracies follow package train: TestAccuracy is that of the
// selected epoch (best validation accuracy, ties to the lower validation
// loss, then the earlier epoch; or the last epoch with Select "last").
type Report struct {
	Schema        int            `json:"schema"`
	Dataset       string         `json:"dataset"`
	Model         string         `json:"model"`
	Mode          string         `json:"mode"`
	Engine        string         `json:"engine"`  // "distributed" or "tape"
	Devices       []string       `json:"devices"` // one per rank
	Seed          uint64         `json:"seed"`
	ValAccuracy   float64        `json:"val_accuracy"`
	TestAccuracy  float64        `json:"test_accuracy"`
	SelectedEpoch int            `json:"selected_epoch"`
	Selection     string         `json:"selection"`
	LastValAcc    float64        `json:"last_val_accuracy"`
	LastTestAcc   float64        `json:"last_test_accuracy"`
	TotalSeconds  float64        `json:"total_seconds"`
	EpochSeconds  float64        `json:"mean_epoch_seconds"` // training only, without evaluation
	RowNormalized bool           `json:"row_normalized"`
	Graph         GraphStats     `json:"graph"`
	Partition     PartitionStats `json:"partition"`
	Memory        MemoryStats    `json:"memory"`
	Comm          CommStats      `json:"comm"`
	Config        Config         `json:"config"`
	Epochs        []EpochRecord  `json:"epochs"`
}

// GraphStats summarizes the dataset.
type GraphStats struct {
	Nodes    int64 `json:"nodes"`
	Edges    int64 `json:"edges"`
	Features int   `json:"features"`
	Classes  int   `json:"classes"`
	Train    int   `json:"train"`
	Val      int   `json:"val"`
	Test     int   `json:"test"`
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

// EpochRecord is one epoch: the training loss (mean over the training
// nodes, with dropout, before the update), the accuracies of the
// evaluation after it (when Evaluated) and the epoch's communication.
type EpochRecord struct {
	Epoch         int     `json:"epoch"`
	Loss          float64 `json:"loss"`
	Evaluated     bool    `json:"evaluated"`
	TrainAccuracy float64 `json:"train_accuracy"`
	ValAccuracy   float64 `json:"val_accuracy"`
	TestAccuracy  float64 `json:"test_accuracy"`
	ValLoss       float64 `json:"val_loss"`
	Seconds       float64 `json:"seconds"`      // training step
	EvalSeconds   float64 `json:"eval_seconds"` // evaluation

	Broadcasts       int64   `json:"broadcasts"`
	Skipped          int64   `json:"broadcasts_skipped"`
	BytesSent        int64   `json:"bytes_sent"`
	BytesAvoided     int64   `json:"bytes_avoided"`
	GradBytesSent    int64   `json:"grad_bytes_sent"`
	GradBytesAvoided int64   `json:"grad_bytes_avoided"`
	MaxAge           int     `json:"max_age"`
	MeanDrift        float64 `json:"mean_drift"`
	EpsScale         float64 `json:"eps_scale"` // adaptive scale of Epsilon this epoch
}

func better(a, b *EpochRecord) bool {
	if a.ValAccuracy != b.ValAccuracy {
		return a.ValAccuracy > b.ValAccuracy
	}
	return a.ValLoss < b.ValLoss
}

// summarize fills the headline fields from the evaluated epochs.
func (r *Report) summarize() {
	var best, last *EpochRecord
	var train float64
	for i := range r.Epochs {
		e := &r.Epochs[i]
		train += e.Seconds
		if !e.Evaluated {
			continue
		}
		if best == nil || better(e, best) {
			best = e
		}
		last = e
	}
	if len(r.Epochs) > 0 {
		r.EpochSeconds = train / float64(len(r.Epochs))
	}
	if last == nil {
		return
	}
	r.LastValAcc, r.LastTestAcc = last.ValAccuracy, last.TestAccuracy
	sel := best
	r.Selection = SelectBest
	if r.Config.Select == SelectLast {
		sel, r.Selection = last, SelectLast
	}
	r.SelectedEpoch, r.ValAccuracy, r.TestAccuracy = sel.Epoch, sel.ValAccuracy, sel.TestAccuracy
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
	if r.Schema != ReportVersion {
		return nil, fmt.Errorf("fullgraph: report %s: schema %d, this build reads %d", path, r.Schema, ReportVersion)
	}
	return &r, nil
}
