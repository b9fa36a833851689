package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// ReportVersion is the schema version of Report's JSON.
const ReportVersion = 1

// Version is the Strata version written into reports and checkpoints.
var Version = "0.1.0-dev"

// Report is the result of a run, written as JSON by --report.
//
// Headline numbers: TestAccuracy and ValAccuracy are those of the
// selected epoch (SelectedEpoch). With Config.Select "best" (the default)
// that is the epoch with the highest validation accuracy — ties go to the
// lower validation loss, then to the earlier epoch — which is how the GCN
// and GAT papers report test accuracy. LastTestAccuracy and
// LastValAccuracy are always those of the final epoch.
type Report struct {
	Schema        int     `json:"schema"`
	StrataVersion string  `json:"strata_version"`
	Dataset       string  `json:"dataset"`
	Model         string  `json:"model"`
	Mode          string  `json:"mode"`
	Device        string  `json:"device"`
	Seed          uint64  `json:"seed"`
	ValAccuracy   float64 `json:"val_accuracy"`
	TestAccuracy  float64 `json:"test_accuracy"`
	SelectedEpoch int     `json:"selected_epoch"`
	Selection     string  `json:"selection"`
	BestValEpoch  int     `json:"best_val_epoch"`
	BestValAcc    float64 `json:"best_val_accuracy"`
	TestAtBestVal float64 `json:"test_accuracy_at_best_val"`
	LastValAcc    float64 `json:"last_val_accuracy"`
	LastTestAcc   float64 `json:"last_test_accuracy"`
	TotalSeconds  float64 `json:"total_seconds"`
	// RowNormalized says whether the features were row-normalized
	// (Config.RowNorm "auto" decides by their sign).
	RowNormalized bool `json:"row_normalized"`
	// ResumedFrom is the cursor a resumed run started at, nil otherwise.
	ResumedFrom *Cursor       `json:"resumed_from,omitempty"`
	Graph       GraphStats    `json:"graph"`
	Config      Config        `json:"config"`
	Epochs      []EpochRecord `json:"epochs"`
}

// GraphStats summarizes the dataset trained on.
type GraphStats struct {
	Nodes    int64 `json:"nodes"`
	Edges    int64 `json:"edges"`
	Features int   `json:"features"`
	Classes  int   `json:"classes"`
	Train    int   `json:"train"`
	Val      int   `json:"val"`
	Test     int   `json:"test"`
}

// Cursor is a position in training: the next batch to run is Batch of
// Epoch (both 0-based).
type Cursor struct {
	Epoch int `json:"epoch"`
	Batch int `json:"batch"`
}

// EpochRecord is one epoch of training. Epoch is 1-based. Loss is the mean
// of BatchLosses (the training loss of each batch, with dropout, before
// that batch's update). The accuracies come from the evaluation after the
// epoch (no dropout): TrainAccuracy on the training nodes, ValAccuracy and
// TestAccuracy on the validation and test nodes; ValLoss is the validation
// cross-entropy. Seconds is the wall time of the epoch's training and
// evaluation.
type EpochRecord struct {
	Epoch         int       `json:"epoch"`
	Loss          float64   `json:"loss"`
	TrainAccuracy float64   `json:"train_accuracy"`
	ValAccuracy   float64   `json:"val_accuracy"`
	TestAccuracy  float64   `json:"test_accuracy"`
	ValLoss       float64   `json:"val_loss"`
	Seconds       float64   `json:"seconds"`
	BatchLosses   []float64 `json:"batch_losses"`
}

// better reports whether epoch record a beats b for best-validation
// selection (b earlier than a).
func better(a, b *EpochRecord) bool {
	if a.ValAccuracy != b.ValAccuracy {
		return a.ValAccuracy > b.ValAccuracy
	}
	return a.ValLoss < b.ValLoss
}

// Summarize fills the headline fields from r.Epochs: the selected epoch
// is the best by validation accuracy (ties: lower validation loss, then
// earlier), or the last with Config.Select last.
func (r *Report) Summarize() {
	if len(r.Epochs) == 0 {
		return
	}
	best := &r.Epochs[0]
	for i := range r.Epochs[1:] {
		if e := &r.Epochs[i+1]; better(e, best) {
			best = e
		}
	}
	last := &r.Epochs[len(r.Epochs)-1]
	r.BestValEpoch, r.BestValAcc, r.TestAtBestVal = best.Epoch, best.ValAccuracy, best.TestAccuracy
	r.LastValAcc, r.LastTestAcc = last.ValAccuracy, last.TestAccuracy
	sel := best
	r.Selection = SelectBest
	if r.Config.Select == SelectLast {
		sel, r.Selection = last, SelectLast
	}
	r.SelectedEpoch, r.ValAccuracy, r.TestAccuracy = sel.Epoch, sel.ValAccuracy, sel.TestAccuracy
}

// WriteJSON writes the report to path (indented JSON), replacing the file
// atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("train: writing %s: %w", path, err)
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
		return nil, fmt.Errorf("train: report %s: %w", path, err)
	}
	if r.Schema != ReportVersion {
		return nil, fmt.Errorf("train: report %s: schema %d, this build reads %d", path, r.Schema, ReportVersion)
	}
	return &r, nil
}

func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data); err != nil {
		return fmt.Errorf("train: writing %s: %w", path, err)
	}
	return nil
}
