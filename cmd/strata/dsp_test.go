package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainDevicesCPU: 'strata train --devices cpu:2' runs DSP training
// and writes its report with the pipeline metrics.
func TestTrainDevicesCPU(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "out", "report.json")
	code, out, errOut := strata(t, "train", "--devices", "cpu:2", "--epochs", "2", "--hidden", "16",
		"--cache", "1MiB", "--hotness", "pagerank", "--report", rep)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"test accuracy", "pipeline", "cache hit", "cpu x2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "on 2 devices") || !strings.Contains(errOut, "epoch 2/2") {
		t.Fatalf("log:\n%s", errOut)
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Epochs []json.RawMessage `json:"epochs"`
		DSP    struct {
			Devices   int    `json:"devices"`
			Hotness   string `json:"hotness"`
			PerDevice []struct {
				CacheBytes int64 `json:"cache_bytes"`
			} `json:"per_device"`
		} `json:"dsp"`
		Metrics struct {
			Summary struct {
				Cache struct {
					HitRate float64 `json:"hit_rate"`
				} `json:"cache"`
			} `json:"summary"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Epochs) != 2 || r.DSP.Devices != 2 || r.DSP.Hotness != "pagerank" || len(r.DSP.PerDevice) != 2 {
		t.Fatalf("report: %+v", r.DSP)
	}
	for _, d := range r.DSP.PerDevice {
		if d.CacheBytes <= 0 || d.CacheBytes > 1<<20 {
			t.Fatalf("device cache of %d bytes with --cache 1MiB", d.CacheBytes)
		}
	}
	if h := r.Metrics.Summary.Cache.HitRate; h <= 0 || h >= 1 {
		t.Fatalf("hit rate %v", h)
	}
}

// TestTrainDevicesDeviceEngine: --engine device runs package dsp/gpurun
// (here on CPU back ends) with the pipeline on or off and writes its
// report with the epoch timings.
func TestTrainDevicesDeviceEngine(t *testing.T) {
	for _, extra := range [][]string{nil, {"--no-pipeline"}} {
		rep := filepath.Join(t.TempDir(), "report.json")
		args := append([]string{"train", "--devices", "cpu:2", "--engine", "device", "--epochs", "2", "--hidden", "16",
			"--cache", "64KiB", "--eval-every", "100", "--report", rep}, extra...)
		code, out, errOut := strata(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", extra, code, errOut)
		}
		for _, want := range []string{"test accuracy", "cache hit", "epoch time", "cpu x2"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%v: output lacks %q:\n%s", extra, want, out)
			}
		}
		if !strings.Contains(errOut, "device engine") || !strings.Contains(errOut, "epoch 2/2") {
			t.Fatalf("%v: log:\n%s", extra, errOut)
		}
		data, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Epochs []json.RawMessage `json:"epochs"`
			Run    struct {
				Pipeline      bool      `json:"pipeline"`
				EpochSeconds  []float64 `json:"epoch_train_seconds"`
				ReplicasEqual bool      `json:"replicas_equal"`
			} `json:"device_run"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Epochs) != 1 || len(r.Run.EpochSeconds) != 2 || !r.Run.ReplicasEqual || r.Run.Pipeline != (extra == nil) {
			t.Fatalf("%v: report %+v, %d evaluated epochs", extra, r.Run, len(r.Epochs))
		}
	}
}

func TestTrainDevicesUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices", "cpu:0"}, "cpu:N"},
		{[]string{"--devices", "cpu:2", "--cache", "12XB"}, "--cache"},
		{[]string{"--devices", "cpu:2", "--topology-cache", "-5"}, "--topology-cache"},
		{[]string{"--devices", "cpu:2", "--model", "gcn"}, "--mode full"},
		{[]string{"--devices", "cpu:2", "--checkpoint", "x"}, "checkpoints"},
		{[]string{"--devices", "cpu,cpu"}, "repeated"},
		{[]string{"--devices", "cpu:3", "--cache-policy", "replicate", "--cache-group", "2"}, "does not divide"},
		{[]string{"--devices", "cpu:2", "--no-pipeline"}, "device engine"},
		{[]string{"--devices", "cpu:2", "--engine", "device", "--scheme", "layer"}, "node-wise"},
	} {
		code, _, errOut := strata(t, append([]string{"train", "--quiet"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("%v: exit %d, stderr %q, want it to mention %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "64MiB": 64 << 20, "1.5GB": 1_500_000_000, "2 KiB": 2048, "all": -1, "ALL": -1} {
		if got, err := parseBytes("cache", in); err != nil || got != want {
			t.Fatalf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "MiB", "1e30", "x"} {
		if _, err := parseBytes("cache", bad); err == nil {
			t.Fatalf("parseBytes(%q) accepted", bad)
		}
	}
}
