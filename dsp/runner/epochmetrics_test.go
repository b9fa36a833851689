package runner

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dsp/metrics"
)

// TestEpochMetrics: the pipeline figures of each epoch line are that
// epoch's, not the run's so far (they were cumulative): one record per
// epoch in the report, device 0's trainer ran exactly the epoch's batches
// (a peer's trainer at most one more, counted late; cumulative counts
// would grow epoch by epoch), the epochs add up to the run's total, and
// each epoch line ends with its epoch's figures.
func TestEpochMetrics(t *testing.T) {
	var log bytes.Buffer
	cfg := small(2, 3)
	cfg.Train.BatchSize = 16
	rep, err := runTiny(tiny(t), cfg, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	m, n := rep.Metrics, int64(rep.DSP.BatchesPerDevice)
	if len(m.Epochs) != 3 || n < 2 {
		t.Fatalf("%d epochs of metrics, %d batches per device", len(m.Epochs), n)
	}
	var steps int64
	for i, e := range m.Epochs {
		tr := e.Stages[metrics.Trainer]
		if e.Epoch != i+1 || tr.Items < n || tr.Items > n+1 {
			t.Fatalf("epoch %d: %d trainer steps, want %d or %d", e.Epoch, tr.Items, n, n+1)
		}
		steps += tr.Items
		line, seen := fmt.Sprintf("epoch %d/3 ", e.Epoch), false
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.HasPrefix(l, line) {
				seen = true
				if !strings.HasSuffix(l, "  "+e.Summary.String()) {
					t.Fatalf("epoch %d's line %q does not end with its figures %q", e.Epoch, l, e.Summary.String())
				}
			}
		}
		if !seen {
			t.Fatalf("no line for epoch %d:\n%s", e.Epoch, log.String())
		}
	}
	if total := m.Summary.Stages[metrics.Trainer].Items; total != 3*n || steps < total || steps > total+2 {
		t.Fatalf("per-epoch trainer steps add up to %d, the run's total is %d (%d batches per device)", steps, total, n)
	}
}
