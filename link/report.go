package link

import (
	"fmt"

	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// ReportVersion is the schema version of Report's JSON.
const ReportVersion = 1

// Report is the result of a link-prediction run, written as JSON by
// --report. Val and Test are the metrics of the selected epoch
// (SelectedEpoch): with Config.Select "best" the evaluated epoch with the
// highest validation AUC (ties: lower validation loss, then the earlier
// epoch); LastVal and LastTest are the final epoch's.
type Report struct {
	Schema        int    `json:"schema"`
	StrataVersion string `json:"strata_version"`
	Task          string `json:"task"` // "link"
	Dataset       string `json:"dataset"`
	Model         string `json:"model"`
	Mode          string `json:"mode"`
	Decoder       string `json:"decoder"`
	Device        string `json:"device"`
	// Engine is the multi-device trainer ("dsp" or "fullgraph";
	// package link/multi) and Devices its devices; empty and 0 for
	// link.Run's one device.
	Engine        string        `json:"engine,omitempty"`
	Devices       int           `json:"devices,omitempty"`
	Seed          uint64        `json:"seed"`
	HitsK         int           `json:"hits_k"`
	Val           Metrics       `json:"val"`
	Test          Metrics       `json:"test"`
	SelectedEpoch int           `json:"selected_epoch"`
	Selection     string        `json:"selection"`
	LastVal       Metrics       `json:"last_val"`
	LastTest      Metrics       `json:"last_test"`
	TotalSeconds  float64       `json:"total_seconds"`
	RowNormalized bool          `json:"row_normalized"`
	Graph         Graph         `json:"graph"`
	Split         Stats         `json:"split"`
	Config        Config        `json:"config"`
	Epochs        []EpochRecord `json:"epochs"`
}

// Graph summarizes the dataset trained on.
type Graph struct {
	Nodes    int64 `json:"nodes"`
	Edges    int64 `json:"edges"`
	Features int   `json:"features"`
}

// EpochRecord is one epoch: the mean of its batch losses (binary
// cross-entropy with dropout, before each batch's update) and, when it
// was evaluated (Common.EvalEvery), the validation and test metrics.
type EpochRecord struct {
	Epoch       int       `json:"epoch"`
	Loss        float64   `json:"loss"`
	EvalSkipped bool      `json:"eval_skipped,omitempty"`
	Val         Metrics   `json:"val"`
	Test        Metrics   `json:"test"`
	Seconds     float64   `json:"seconds"`
	EvalSeconds float64   `json:"eval_seconds,omitempty"`
	BatchLosses []float64 `json:"batch_losses"`
}

// Selection is rec as train's selection rule (train.Better,
// train.Keeper) reads it: the validation AUC in place of the accuracy
// (ties to the lower validation loss), the test AUC in the test
// accuracy's place.
func (rec *EpochRecord) Selection() train.EpochRecord {
	return train.EpochRecord{Epoch: rec.Epoch, Loss: rec.Loss, EvalSkipped: rec.EvalSkipped,
		ValAccuracy: rec.Val.AUC, ValLoss: rec.Val.Loss, TestAccuracy: rec.Test.AUC}
}

// better reports whether a beats b (b earlier) for best-validation
// selection: train.Better on their Selection.
func better(a, b *EpochRecord) bool {
	as, bs := a.Selection(), b.Selection()
	return train.Better(&as, &bs)
}

// Summarize fills the headline from the evaluated epochs.
func (r *Report) Summarize() {
	var best, last *EpochRecord
	for i := range r.Epochs {
		e := &r.Epochs[i]
		if e.EvalSkipped {
			continue
		}
		if best == nil || better(e, best) {
			best = e
		}
		last = e
	}
	if last == nil {
		return
	}
	r.LastVal, r.LastTest = last.Val, last.Test
	sel := best
	r.Selection = train.SelectBest
	if r.Config.Select == train.SelectLast {
		sel, r.Selection = last, train.SelectLast
	}
	r.SelectedEpoch, r.Val, r.Test = sel.Epoch, sel.Val, sel.Test
}

// WriteJSON writes the report to path (indented JSON), replacing the file
// atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("link: writing %s: %w", path, err)
	}
	return nil
}

// MetricsLine formats metrics with Hits@k: "auc 0.9123  mrr 0.0456  hits@50 0.6120".
func MetricsLine(m Metrics, k int) string {
	line := fmt.Sprintf("auc %.4f  mrr %.4f  hits@%d %.4f", m.AUC, m.MRR, k, m.Hits)
	if m.Constant {
		line += " (every pair scored the same: the encoder collapsed; try a lower --lr)"
	}
	return line
}

// EpochLine is an epoch's log line: its loss, the validation and test
// metrics when it was evaluated, and its wall time.
func EpochLine(rec *EpochRecord, epochs, k int) string {
	line := fmt.Sprintf("epoch %*d/%d  loss %.4f", len(fmt.Sprint(epochs)), rec.Epoch, epochs, rec.Loss)
	if !rec.EvalSkipped {
		line += fmt.Sprintf("  val %s  test %s", MetricsLine(rec.Val, k), MetricsLine(rec.Test, k))
	}
	return line + fmt.Sprintf("  (%.2fs)", rec.Seconds)
}
