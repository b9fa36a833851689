package engine

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// A run reports the time from its start to its first batch and the
// setup's phases: the caller's first, then every phase of Run in order,
// and each device's parts; the log gets a line saying so.
func TestSetupPhases(t *testing.T) {
	const k = 2
	cfg := small(k, 1)
	start := time.Now().Add(-time.Second) // the caller had run for a second
	var log bytes.Buffer
	rep := run(t, cfg, Options{Log: &log, Start: start, Phases: []SetupPhase{{Phase: "open", Device: -1, Seconds: 0.25}}})
	r := rep.Run
	if r.FirstBatchSeconds < 1 || r.FirstBatchSeconds > rep.TotalSeconds+1 {
		t.Fatalf("first batch after %.3fs, want between the caller's 1s and the run's end (%.3fs)", r.FirstBatchSeconds, rep.TotalSeconds+1)
	}
	var whole []string
	perDevice := map[string][]int{}
	for _, p := range r.SetupPhases {
		if p.Seconds < 0 {
			t.Errorf("phase %+v took negative time", p)
		}
		if p.Device < 0 {
			whole = append(whole, p.Phase)
		} else {
			perDevice[p.Phase] = append(perDevice[p.Phase], p.Device)
		}
	}
	want := []string{"open", "check", "partition", "graph", "features", "hotness", "plan", "patches", "comms", "placement", "first batch", "other"}
	if !slices.Equal(whole, want) {
		t.Fatalf("phases %v, want %v", whole, want)
	}
	if r.SetupPhases[0].Seconds != 0.25 {
		t.Fatalf("the caller's phase became %+v", r.SetupPhases[0])
	}
	for _, name := range []string{"topology", "feature cache", "model", "placement"} {
		got := slices.Sorted(slices.Values(perDevice[name]))
		if !slices.Equal(got, []int{0, 1}) {
			t.Errorf("%s recorded for devices %v, want [0 1]", name, got)
		}
	}
	line := ""
	for l := range strings.Lines(log.String()) {
		if strings.HasPrefix(l, "first batch ") {
			line = l
		}
	}
	var sum float64
	for _, p := range r.SetupPhases {
		if p.Device < 0 {
			sum += p.Seconds
		}
	}
	if d := sum - r.FirstBatchSeconds; d < -1e-3 || d > 1e-3 {
		t.Errorf("the phases of the whole run add up to %.4fs, the first batch came after %.4fs", sum, r.FirstBatchSeconds)
	}
	if !strings.Contains(line, "after the start; setup: open 0.25s, check ") || !strings.Contains(line, "(2 devices)") {
		t.Fatalf("log line %q, want the first batch's time and the phases", line)
	}
	// Without Options.Start the origin is Run's call.
	if r := run(t, cfg, Options{}).Run; r.FirstBatchSeconds <= 0 || len(r.SetupPhases) == 0 || r.SetupPhases[0].Phase != "check" {
		t.Fatalf("no Start: first batch after %.3fs, phases %+v", r.FirstBatchSeconds, r.SetupPhases)
	}
}

// TestCachesEverythingPrecision: whether every row fits the budget counts
// the stores' value size (cache.ValueBytes): a budget of 2 bytes a value
// holds the whole table at bf16 (no hotness is computed then) but not at
// fp32, where it takes 4.
func TestCachesEverythingPrecision(t *testing.T) {
	for _, tc := range []struct {
		prec string
		vb   int64
	}{{"fp32", 4}, {"bf16", 2}} {
		cfg := small(1, 1)
		cfg.Train.Precision = tc.prec
		s := setupShared(t, cfg, nil)
		whole := s.pd.ds.NumNodes() * int64(s.dim)
		if !s.cachesEverything(tc.vb*whole) || s.cachesEverything(tc.vb*whole-1) {
			t.Errorf("%s: %d bytes a value: budgets %d / %d cache everything: %v / %v, want true / false",
				tc.prec, tc.vb, tc.vb*whole, tc.vb*whole-1, s.cachesEverything(tc.vb*whole), s.cachesEverything(tc.vb*whole-1))
		}
		if tc.prec == "fp32" && s.cachesEverything(2*whole) {
			t.Errorf("fp32: half the table's bytes cache everything")
		}
	}
}
