package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// TestTrainDevicesResume: both engines write a checkpoint after every
// epoch; a later run with --resume and more epochs goes on from it and
// reports every epoch as an uninterrupted run of that length does (the
// host engine: losses and accuracies bit for bit), one without --resume
// refuses to overwrite it, and the other engine refuses to resume it.
func TestTrainDevicesResume(t *testing.T) {
	type epoch struct {
		Epoch        int       `json:"epoch"`
		Loss         float64   `json:"loss"`
		BatchLosses  []float64 `json:"batch_losses"`
		ValAccuracy  float64   `json:"val_accuracy"`
		TestAccuracy float64   `json:"test_accuracy"`
	}
	type report struct {
		ResumedFrom *struct{ Epoch int } `json:"resumed_from"`
		Epochs      []epoch              `json:"epochs"`
		Run         struct {
			EpochSeconds []float64 `json:"epoch_train_seconds"`
		} `json:"device_run"`
	}
	read := func(path string) report {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, engine := range []string{"host", "device"} {
		dir := t.TempDir()
		rep := filepath.Join(dir, "report.json")
		base := []string{"train", "--quiet", "--devices", "cpu:2", "--engine", engine, "--hidden", "16", "--checkpoint", dir}
		if code, _, errOut := strata(t, append(base, "--epochs", "2")...); code != 0 {
			t.Fatalf("%s: first run: exit %d\n%s", engine, code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "checkpoint.strata")); err != nil {
			t.Fatalf("%s: no checkpoint: %v", engine, err)
		}
		if code, _, errOut := strata(t, append(base, "--epochs", "3")...); code != 1 || !strings.Contains(errOut, "--resume") {
			t.Fatalf("%s: run over an existing checkpoint: exit %d, stderr %q", engine, code, errOut)
		}
		other := map[string]string{"host": "device", "device": "host"}[engine]
		if code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--engine", other, "--hidden", "16", "--checkpoint", dir,
			"--epochs", "3", "--resume"); code != 1 || !strings.Contains(errOut, "written by the "+engine+" engine") {
			t.Fatalf("%s: resumed by the %s engine: exit %d, stderr %q", engine, other, code, errOut)
		}
		if code, _, errOut := strata(t, append(base, "--epochs", "3", "--resume", "--hidden", "32")...); code != 1 || !strings.Contains(errOut, "hidden is 32") {
			t.Fatalf("%s: resumed with another --hidden: exit %d, stderr %q", engine, code, errOut)
		}
		if code, _, errOut := strata(t, append(base, "--epochs", "3", "--resume", "--report", rep)...); code != 0 {
			t.Fatalf("%s: resumed run: exit %d\n%s", engine, code, errOut)
		}
		got := read(rep)
		if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 2 {
			t.Fatalf("%s: report resumed from %+v", engine, got.ResumedFrom)
		}
		if engine == "device" {
			if len(got.Run.EpochSeconds) != 3 {
				t.Fatalf("device: %d epoch times", len(got.Run.EpochSeconds))
			}
			continue
		}
		whole := filepath.Join(t.TempDir(), "whole.json")
		if code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--engine", "host", "--hidden", "16", "--epochs", "3",
			"--report", whole); code != 0 {
			t.Fatalf("uninterrupted run: exit %d\n%s", code, errOut)
		}
		want := read(whole)
		if len(got.Epochs) != 3 || len(want.Epochs) != 3 {
			t.Fatalf("%d epochs resumed, %d uninterrupted", len(got.Epochs), len(want.Epochs))
		}
		for i, w := range want.Epochs {
			g := got.Epochs[i]
			if g.Epoch != w.Epoch || g.Loss != w.Loss || !slices.Equal(g.BatchLosses, w.BatchLosses) || g.ValAccuracy != w.ValAccuracy ||
				g.TestAccuracy != w.TestAccuracy {
				t.Fatalf("epoch %d resumed %+v\nuninterrupted %+v", w.Epoch, g, w)
			}
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
		{[]string{"--devices", "cpu:2", "--engine", "host", "--checkpoint", "x", "--checkpoint-every", "5"}, "after every epoch"},
		{[]string{"--devices", "cpu:2", "--engine", "device", "--checkpoint", "x", "--checkpoint-every", "5"}, "after every epoch"},
		{[]string{"--devices", "cpu,cpu"}, "repeated"},
		{[]string{"--devices", "cpu:3", "--cache-policy", "replicate", "--cache-group", "2"}, "does not divide"},
		{[]string{"--devices", "cpu:2", "--no-pipeline"}, "device engine"},
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
	for _, bad := range []string{"", "-1", "MiB", "1e30", "x", "NaN", "nan", "Inf", "-0.5KiB"} {
		if _, err := parseBytes("cache", bad); err == nil {
			t.Fatalf("parseBytes(%q) accepted", bad)
		}
	}
}

// TestTrainFlagValueErrors: every bad value of the multi-device flags, and
// every flag given in a mode that does not read it, is a usage error (exit
// 2) naming the flag and the value, before any dataset or device opens.
func TestTrainFlagValueErrors(t *testing.T) {
	d := []string{"--devices", "cpu:2"}
	dev := []string{"--devices", "cpu:2", "--engine", "device"}
	fg := []string{"--mode", "fullgraph", "--model", "gcn", "--devices", "cpu:2"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices", "cuda:abc"}, `entry "cuda:abc"`},
		{[]string{"--devices", "cuda:0,cuda:0"}, `repeated entry "cuda:0"`},
		{[]string{"--devices", "cuda,cuda:0"}, `repeated entry "cuda:0"`},
		{[]string{"--devices", "cuda:-1"}, `entry "cuda:-1"`},
		{[]string{"--devices", "cuda:99999999999999999999"}, `entry "cuda:99999999999999999999"`},
		{[]string{"--devices", "cuda:0,,1"}, `entry ""`},
		{[]string{"--devices", "cpu:-1"}, "--devices cpu:-1: want cpu:N"},
		{[]string{"--devices", "cpu:100000"}, "--devices cpu:100000: want cpu:N"},
		{[]string{"--devices", "cpu:2,cuda:0"}, `entry "cuda:0" mixes kind cuda with cpu`},
		{[]string{"--devices", strings.Repeat("cuda:1,", 1100) + "cuda:0"}, "1101 entries, at most 1024"},
		{with(fg[:4], "--devices", "cpu,cuda:0"), "mixes kind"},
		{with(d, "--stall-timeout", "0"), `--stall-timeout "0"`},
		{with(d, "--stall-timeout=-5s"), `--stall-timeout "-5s"`},
		{with(d, "--stall-timeout", "soon"), `--stall-timeout "soon"`},
		{with(d, "--cache", "NaN"), `--cache "NaN"`},
		{with(d, "--cache", "Inf"), `--cache "Inf"`},
		{with(d, "--cache=-1"), `--cache "-1"`},
		{with(d, "--cache", "1e30GiB"), `--cache "1e30"`},
		{with(d, "--topology-cache", "1e30"), `--topology-cache "1e30"`},
		{with(d, "--cache-group", "0"), "--cache-group 0: want 1..1024"},
		{with(d, "--cache-group", "2"), "--cache-group 2 needs --cache-policy replicate"},
		{with(d, "--cache-policy", "replicate", "--cache-group", "0"), "--cache-group 0: want 1..1024"},
		{with(d, "--cache-policy", "replicate", "--cache-group", "5"), "--cache-group 5 does not divide"},
		{with(d, "--cache-policy", "replicate", "--cache-group=-2"), "--cache-group -2"},
		{with(d, "--queue-capacity", "0"), "--queue-capacity 0: want 1..1024"},
		{with(d, "--queue-capacity=-1"), "--queue-capacity -1"},
		{with(d, "--queue-capacity", "1000000000000"), "--queue-capacity 1000000000000"},
		{with(dev, "--eval-every", "0"), "--eval-every 0"},
		{with(dev, "--eval-every=-3"), "--eval-every -3"},
		{with(d, "--eval-every", "2"), "--eval-every 2 needs the device engine"},
		{with(d, "--engine", "host", "--no-pipeline"), "--no-pipeline needs the device engine"},
		{with(d, "--engine", "host", "--sampler-workers", "2"), "--sampler-workers 2 needs the device engine"},
		{with(dev, "--sampler-workers", "9"), "--sampler-workers 9: want 1..8"},
		{with(dev, "--sampler-workers", "0"), "--sampler-workers 0: want 1..8"},
		{with(dev, "--sampler-workers", "2", "--no-pipeline"), "--sampler-workers 2 needs the pipeline"},
		{with(dev, "--shared-stream"), "--shared-stream needs CUDA --devices"},
		{with(dev, "--gpu-sampler", "full"), "--gpu-sampler full needs CUDA --devices"},
		{with(d, "--comm", "nccl"), "--comm applies to --mode fullgraph only"},
		{with(d, "--masks", "local"), "--masks applies to --mode fullgraph only"},
		{with(d, "--staleness-eps", "0.1"), "--staleness-eps applies to --mode fullgraph only"},
		{with(d, "--node-order", "degree"), "--node-order applies to --mode fullgraph only"},
		{with(d, "--partition-file", "dsp_test.go"), "--partition-file applies to --mode fullgraph only"},
		{[]string{"--model", "gcn", "--engine", "device"}, "--engine applies to sampled mode"},
		{[]string{"--eval-every", "3"}, "--eval-every needs --devices"},
		{[]string{"--partition", "range"}, "--partition needs --devices"},
		{with(fg, "--cache", "5MiB"), "--cache does not apply to --mode fullgraph"},
		{with(fg, "--engine", "device"), "--engine does not apply to --mode fullgraph"},
		{with(fg, "--stall-timeout", "5s"), "--stall-timeout does not apply to --mode fullgraph"},
		{with(fg, "--eval-every", "0"), "--eval-every 0: want 1..1048576"},
		{with(fg, "--staleness", "--staleness-eps", "NaN"), "--staleness-eps NaN"},
		{with(fg, "--staleness", "--staleness-epochs=-1"), "--staleness-epochs -1"},
		{with(fg, "--partition-file", "no-such-file"), "no-such-file"},
	} {
		code, _, errOut := strata(t, append([]string{"train", "--quiet"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") > 1 && !strings.Contains(errOut, "Usage") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errOut, tc.want)
		}
	}
}
