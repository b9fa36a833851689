package multi

import (
	"context"
	"math"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/link"
)

func runFG(t testing.TB, ds *dataset.Dataset, cfg link.Config, p int, mod func(*fullgraph.Config)) *link.Report {
	t.Helper()
	fc := fullgraph.Defaults(cfg.Model)
	if mod != nil {
		mod(&fc)
	}
	rep, _, err := RunFullGraph(context.Background(), ds, cfg, fc, fullgraph.Options{Backends: cpus(t, p)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestFullGraphOneDeviceEqualsLinkRun: on one device the full-graph
// trainer's link run is link.Run's in full mode: the same losses (to
// float rounding) and metrics.
func TestFullGraphQuick(t *testing.T) {
	ds := cora(t)
	cfg := link.Defaults("gcn")
	want, err := link.Run(context.Background(), ds, cfg, link.Options{Backend: cpus(t, 1)[0]})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 4} {
		got := runFG(t, ds, cfg, p, nil)
		var maxd float64
		for i := range want.Epochs {
			maxd = max(maxd, math.Abs(got.Epochs[i].Loss-want.Epochs[i].Loss))
		}
		t.Logf("p=%d: test %s epoch %d (%.1fs), max loss diff %.2g; link.Run test %s epoch %d", p, link.MetricsLine(got.Test, 50), got.SelectedEpoch, got.TotalSeconds, maxd, link.MetricsLine(want.Test, 50), want.SelectedEpoch)
	}
}
