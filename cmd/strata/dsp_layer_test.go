package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTrainDevicesLayer: 'strata train --devices cpu:2 --scheme layer'
// runs layer-wise DSP on both engines; with dropout on Cora's sparse
// features every batch loss of the device engine equals the host
// engine's up to summation order, and they differ from node-wise
// sampling's.
func TestTrainDevicesLayer(t *testing.T) {
	type report struct {
		Epochs []struct {
			BatchLosses []float64 `json:"batch_losses"`
		} `json:"epochs"`
		DSP struct {
			Scheme string `json:"scheme"`
		} `json:"dsp"`
	}
	train := func(engine, scheme string) []float64 {
		rep := filepath.Join(t.TempDir(), "report.json")
		code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--engine", engine, "--scheme", scheme,
			"--epochs", "2", "--hidden", "16", "--batch-size", "64", "--fanouts", "300,600",
			"--report", rep)
		if code != 0 {
			t.Fatalf("%s engine, %s scheme: exit %d\n%s", engine, scheme, code, errOut)
		}
		data, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if r.DSP.Scheme != scheme {
			t.Fatalf("%s engine: report says scheme %q, want %q", engine, r.DSP.Scheme, scheme)
		}
		var out []float64
		for _, e := range r.Epochs {
			out = append(out, e.BatchLosses...)
		}
		return out
	}
	host, dev := train("host", "layer"), train("device", "layer")
	if len(host) == 0 || len(host) != len(dev) {
		t.Fatalf("%d batch losses on the device engine, %d on the host engine", len(dev), len(host))
	}
	for i := range host {
		if d := math.Abs(dev[i]-host[i]) / math.Abs(host[i]); d > 1e-4 {
			t.Fatalf("batch %d: loss %v on the device engine, %v on the host engine", i, dev[i], host[i])
		}
	}
	if node := train("device", "node"); slices.Equal(node, dev) {
		t.Fatal("node-wise and layer-wise sampling give the same losses")
	}
}
