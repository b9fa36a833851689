package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTrainDevicesLayer: 'strata train --devices cpu:2 --scheme layer'
// runs layer-wise DSP (collective layer-wise sampling on the CPU virtual
// devices); the report says so, and the losses differ from node-wise
// sampling's with the same fanouts.
func TestTrainDevicesLayer(t *testing.T) {
	type report struct {
		Epochs []struct {
			BatchLosses []float64 `json:"batch_losses"`
		} `json:"epochs"`
		DSP struct {
			Scheme string `json:"scheme"`
		} `json:"dsp"`
		Run struct {
			Sampler string `json:"sampler"`
		} `json:"device_run"`
	}
	train := func(scheme string) []float64 {
		rep := filepath.Join(t.TempDir(), "report.json")
		code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--scheme", scheme,
			"--epochs", "2", "--hidden", "16", "--batch-size", "64", "--fanouts", "300,600",
			"--report", rep)
		if code != 0 {
			t.Fatalf("%s scheme: exit %d\n%s", scheme, code, errOut)
		}
		data, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if r.DSP.Scheme != scheme || !strings.HasPrefix(r.Run.Sampler, "collective") {
			t.Fatalf("report says scheme %q, sampler %q; want %q, collective", r.DSP.Scheme, r.Run.Sampler, scheme)
		}
		var out []float64
		for _, e := range r.Epochs {
			out = append(out, e.BatchLosses...)
		}
		return out
	}
	layer := train("layer")
	if len(layer) == 0 {
		t.Fatal("no batch losses")
	}
	if node := train("node"); slices.Equal(node, layer) {
		t.Fatal("node-wise and layer-wise sampling give the same losses")
	}
}
