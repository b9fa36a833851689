package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/strata-gnn/strata/dataset"
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
// that is the evaluated epoch with the highest validation accuracy — ties
// go to the lower validation loss, then to the earlier epoch — which is
// how the GCN and GAT papers report test accuracy. LastTestAccuracy and
// LastValAccuracy are always those of the final epoch (which is always
// evaluated).
//
// Run writes it as is; package fullgraph and dsp/engine extend it.
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

// NewReport starts the report of a run of cfg on ds on device (a back
// end's name): everything but the timings, the epochs and the headline
// (Summarize).
func NewReport(ds *dataset.Dataset, cfg Config, device string, rowNormalized bool) *Report {
	return &Report{
		Schema: ReportVersion, StrataVersion: Version, Dataset: ds.Name, Model: cfg.Model, Mode: cfg.Mode,
		Device: device, Seed: cfg.Seed, RowNormalized: rowNormalized, Config: cfg,
		Graph: GraphStats{Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Features: ds.FeatDim, Classes: ds.NumClasses,
			Train: len(ds.Train), Val: len(ds.Val), Test: len(ds.Test)},
	}
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
// that batch's update; whole-graph training has one batch an epoch). The
// accuracies come from the evaluation after the epoch (no dropout):
// TrainAccuracy on the training nodes, ValAccuracy and TestAccuracy on
// the validation and test nodes; ValLoss is the validation cross-entropy.
// EvalSkipped marks an epoch that was not evaluated (Common.EvalEvery):
// its accuracies are zero and no headline selects it. Seconds is the wall
// time of the epoch's training and evaluation, EvalSeconds the
// evaluation's part.
type EpochRecord struct {
	Epoch         int       `json:"epoch"`
	Loss          float64   `json:"loss"`
	EvalSkipped   bool      `json:"eval_skipped,omitempty"`
	TrainAccuracy float64   `json:"train_accuracy"`
	ValAccuracy   float64   `json:"val_accuracy"`
	TestAccuracy  float64   `json:"test_accuracy"`
	ValLoss       float64   `json:"val_loss"`
	Seconds       float64   `json:"seconds"`
	EvalSeconds   float64   `json:"eval_seconds,omitempty"`
	BatchLosses   []float64 `json:"batch_losses"`
}

// SetEvaluation copies an evaluation's accuracies and validation loss
// (Tally.Record) into rec; nil marks rec EvalSkipped.
func (rec *EpochRecord) SetEvaluation(t *Tally) {
	if t == nil {
		rec.EvalSkipped = true
		return
	}
	r := t.Record()
	rec.EvalSkipped = false
	rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, rec.ValLoss = r.TrainAccuracy, r.ValAccuracy, r.TestAccuracy, r.ValLoss
}

// Better reports whether epoch record a beats b for best-validation
// selection (b earlier than a).
func Better(a, b *EpochRecord) bool {
	if a.ValAccuracy != b.ValAccuracy {
		return a.ValAccuracy > b.ValAccuracy
	}
	return a.ValLoss < b.ValLoss
}

// Summarize fills the headline fields from the evaluated epochs of
// r.Epochs, selecting by r.Config.Select.
func (r *Report) Summarize() {
	var best, last *EpochRecord
	for i := range r.Epochs {
		e := &r.Epochs[i]
		if e.EvalSkipped {
			continue
		}
		if best == nil || Better(e, best) {
			best = e
		}
		last = e
	}
	if last == nil {
		return
	}
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
