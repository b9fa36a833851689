package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/train/checkpoint"
)

// TestTrainDevicesCPU: 'strata train --devices cpu:2' runs DSP training
// (here with --comm shm) and writes its report with the pipeline metrics
// and the communication back end, named in the log too.
func TestTrainDevicesCPU(t *testing.T) {
	rep := filepath.Join(t.TempDir(), "out", "report.json")
	code, out, errOut := strata(t, "train", "--devices", "cpu:2", "--epochs", "2", "--hidden", "16",
		"--cache", "1MiB", "--hotness", "pagerank", "--comm", "shm", "--report", rep)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"test accuracy", "pipeline", "cache hit", "cpu x2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "on 2 devices") || !strings.Contains(errOut, "epoch 2/2") || !strings.Contains(errOut, "communication: shm (requested)") {
		t.Fatalf("log:\n%s", errOut)
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Epochs []json.RawMessage `json:"epochs"`
		DSP    struct {
			Devices    int    `json:"devices"`
			Comm       string `json:"comm"`
			CommReason string `json:"comm_reason"`
			Hotness    string `json:"hotness"`
			PerDevice  []struct {
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
	if len(r.Epochs) != 2 || r.DSP.Devices != 2 || r.DSP.Hotness != "pagerank" || len(r.DSP.PerDevice) != 2 ||
		r.DSP.Comm != "shm" || r.DSP.CommReason != "requested" {
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

// TestTrainDevicesPipelineOff: --no-pipeline and --eval-every run on CPU
// virtual devices (the one engine, as on GPUs) and the report carries the
// epoch timings and only the evaluated epochs.
func TestTrainDevicesPipelineOff(t *testing.T) {
	for _, extra := range [][]string{nil, {"--no-pipeline"}} {
		rep := filepath.Join(t.TempDir(), "report.json")
		args := append([]string{"train", "--devices", "cpu:2", "--epochs", "2", "--hidden", "16",
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
		if !strings.Contains(errOut, fmt.Sprintf("pipeline %v, evaluation every 100 epoch(s)", extra == nil)) || !strings.Contains(errOut, "epoch 2/2") {
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

// TestTrainDevicesResume: a run writes a checkpoint after every epoch; a
// later run with --resume and more epochs goes on from it and reports
// every epoch as an uninterrupted run of that length does (losses and
// accuracies bit for bit), one without --resume refuses to overwrite it,
// one with another --hidden refuses to resume it, and a checkpoint of the
// removed host engine is refused in one line saying to start again.
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
	// The race detector's runs (-short) stop after 1 epoch and resume to 2.
	first, total := 2, 3
	if testing.Short() {
		first, total = 1, 2
	}
	firstArg, totalArg := strconv.Itoa(first), strconv.Itoa(total)
	dir := t.TempDir()
	rep := filepath.Join(dir, "report.json")
	base := []string{"train", "--quiet", "--devices", "cpu:2", "--hidden", "16", "--checkpoint", dir}
	if code, _, errOut := strata(t, append(base, "--epochs", firstArg)...); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, errOut)
	}
	ck := filepath.Join(dir, "checkpoint.strata")
	if _, err := os.Stat(ck); err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	if code, _, errOut := strata(t, append(base, "--epochs", totalArg)...); code != 1 || !strings.Contains(errOut, "--resume") {
		t.Fatalf("run over an existing checkpoint: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := strata(t, append(base, "--epochs", totalArg, "--resume", "--hidden", "32")...); code != 1 || !strings.Contains(errOut, "hidden is 32") {
		t.Fatalf("resumed with another --hidden: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := strata(t, append(base, "--epochs", totalArg, "--resume", "--report", rep)...); code != 0 {
		t.Fatalf("resumed run: exit %d\n%s", code, errOut)
	}
	got := read(rep)
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != first || len(got.Run.EpochSeconds) != total {
		t.Fatalf("report resumed from %+v, %d epoch times", got.ResumedFrom, len(got.Run.EpochSeconds))
	}
	whole := filepath.Join(t.TempDir(), "whole.json")
	if code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--hidden", "16", "--epochs", totalArg, "--report", whole); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", code, errOut)
	}
	want := read(whole)
	if len(got.Epochs) != total || len(want.Epochs) != total {
		t.Fatalf("%d epochs resumed, %d uninterrupted", len(got.Epochs), len(want.Epochs))
	}
	for i, w := range want.Epochs {
		g := got.Epochs[i]
		if g.Epoch != w.Epoch || g.Loss != w.Loss || !slices.Equal(g.BatchLosses, w.BatchLosses) || g.ValAccuracy != w.ValAccuracy ||
			g.TestAccuracy != w.TestAccuracy {
			t.Fatalf("epoch %d resumed %+v\nuninterrupted %+v", w.Epoch, g, w)
		}
	}
	// The host engine's checkpoint (its metadata named it; the engine is
	// gone): refused with and without --resume.
	f, err := checkpoint.ReadFile(ck)
	if err != nil {
		t.Fatal(err)
	}
	f.Meta = bytes.Replace(f.Meta, []byte(`"engine":"device"`), []byte(`"engine":"host"`), 1)
	if err := checkpoint.WriteFile(ck, f); err != nil {
		t.Fatal(err)
	}
	for _, more := range [][]string{{"--resume"}, nil} {
		code, _, errOut := strata(t, append(append(base, "--epochs", strconv.Itoa(total+1)), more...)...)
		if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "written by the host engine, which this build no longer has") ||
			!strings.Contains(errOut, "start again without --resume") {
			t.Fatalf("host engine's checkpoint %v: exit %d, stderr %q", more, code, errOut)
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
		{[]string{"--devices", "cpu:2", "--checkpoint", "x", "--checkpoint-every", "5"}, "after every epoch"},
		{[]string{"--devices", "cpu,cpu"}, "repeated"},
		{[]string{"--devices", "cpu:3", "--cache-policy", "replicate", "--cache-group", "2"}, "does not divide"},
		{[]string{"--devices", "cpu:2", "--engine", "host"}, "--engine host: the host engine is gone"},
		{[]string{"--devices", "cpu:2", "--engine", "device"}, "drop --engine"},
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
	if raceDetector {
		t.Skip("flag validation only: run by the non-race pass")
	}
	d := []string{"--devices", "cpu:2"}
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
		{with(d, "--eval-every", "0"), "--eval-every 0"},
		{with(d, "--eval-every=-3"), "--eval-every -3"},
		{with(d, "--engine", "host", "--no-pipeline"), "--engine host: the host engine is gone"},
		{with(d, "--sampler-workers", "9"), "--sampler-workers 9: want 1..8"},
		{with(d, "--sampler-workers", "0"), "--sampler-workers 0: want 1..8"},
		{with(d, "--sampler-workers", "2", "--no-pipeline"), "--sampler-workers: 2 sampler workers need the pipeline"},
		{with(d, "--shared-stream"), "--shared-stream needs CUDA --devices"},
		{with(d, "--gpu-sampler", "full"), "--gpu-sampler full needs CUDA --devices"},
		{with(d, "--comm", "nccl"), "--comm nccl needs CUDA --devices, not cpu"},
		{with(d, "--comm", "host"), "--comm host applies to --mode fullgraph"},
		{with(d, "--comm", "mpi"), `--comm must be one of`},
		{with(d, "--comm", "shm", "--gpushm-slots", "4"), "--gpushm-slots applies to --comm gpushm, not --comm shm"},
		{[]string{"--comm", "shm"}, "--comm needs several devices"},
		{[]string{"--gpushm-slots", "4"}, "--gpushm-slots needs several devices"},
		{with(fg, "--comm", "tcp"), "--comm tcp applies to sampled mode with --devices"},
		{with(d, "--masks", "local"), "--masks applies to --mode fullgraph only"},
		{with(d, "--staleness-eps", "0.1"), "--staleness-eps applies to --mode fullgraph only"},
		{with(d, "--node-order", "degree"), "--node-order applies to --mode fullgraph only"},
		{with(d, "--partition-file", "dsp_test.go"), "--partition-file applies to --mode fullgraph only"},
		{[]string{"--model", "gcn", "--engine", "device"}, "--engine device: the host engine is gone"},
		{[]string{"--partition", "range"}, "--partition needs --devices"},
		{with(fg, "--cache", "5MiB"), "--cache does not apply to --mode fullgraph"},
		{with(fg, "--engine", "device"), "--engine device: the host engine is gone"},
		{with(fg, "--stall-timeout", "5s"), "--stall-timeout does not apply to --mode fullgraph"},
		{with(fg, "--eval-every", "0"), "--eval-every 0: want 1..1048576"},
		{with(fg, "--staleness", "--staleness-eps", "NaN"), "--staleness-eps NaN"},
		{with(fg, "--staleness", "--staleness-epochs=-1"), "--staleness-epochs -1"},
		{with(d, "--staleness-drift", "params"), "--staleness-drift applies to --mode fullgraph only"},
		{with(fg, "--staleness-drift", "params"), "--staleness-* flags need --staleness"},
		{with(fg, "--staleness", "--staleness-drift", "weights"), "--staleness-drift"},
		{with(fg, "--partition-file", "no-such-file"), "no-such-file"},
		{with(d, "--exchange", "halo"), "--exchange applies to --mode fullgraph only"},
		{with(fg, "--exchange", "rows"), "--exchange"},
		{[]string{"--model", "gat", "--mode", "fullgraph", "--devices", "cpu:2", "--exchange", "halo"}, "--exchange: halo applies to gcn and sage"},
	} {
		code, _, errOut := strata(t, append([]string{"train", "--quiet"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") > 1 && !strings.Contains(errOut, "Usage") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestComparisonFlags: --sync-collectives and --no-stage-priority set
// the engine's Config (off by default: asynchronous collectives, stages
// at high priority) and are accepted on CPU devices, where they change
// nothing.
func TestComparisonFlags(t *testing.T) {
	for _, on := range []bool{false, true} {
		args := []string{"--devices", "cpu:2"}
		if on {
			args = append(args, "--sync-collectives", "--no-stage-priority")
		}
		cfg, err := parseTrain(t, args...).dspConfig(2)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.SyncCollectives != on || cfg.NoStagePriority != on {
			t.Fatalf("%v: config has sync collectives %v, no stage priority %v", args, cfg.SyncCollectives, cfg.NoStagePriority)
		}
	}
	code, _, errOut := strata(t, "train", "--devices", "cpu:2", "--epochs", "1", "--hidden", "16", "--cache", "64KiB",
		"--sync-collectives", "--no-stage-priority")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
}

// TestTrainDevicesSetupPhases: a multi-device run on a dataset directory
// reports its time to the first batch and every phase of its setup, from
// opening the devices and verifying the dataset to each device's
// placement, and logs them in one line.
func TestTrainDevicesSetupPhases(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "tiny")
	if code, _, errOut := strata(t, "--quiet", "gen", ds, "--preset", "tiny"); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errOut)
	}
	rep := filepath.Join(dir, "report.json")
	code, _, errOut := strata(t, "train", "--dataset", ds, "--devices", "cpu:2", "--partition", "range", "--epochs", "1",
		"--hidden", "8", "--eval", "sampled", "--report", rep)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "first batch ") || !strings.Contains(errOut, "setup: devices ") {
		t.Fatalf("log lacks the first batch's line:\n%s", errOut)
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Run struct {
			FirstBatchSeconds float64 `json:"first_batch_seconds"`
			SetupPhases       []struct {
				Phase   string  `json:"phase"`
				Device  int     `json:"device"`
				Seconds float64 `json:"seconds"`
			} `json:"setup_phases"`
		} `json:"device_run"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range r.Run.SetupPhases {
		if p.Device < 0 {
			names = append(names, p.Phase)
		}
	}
	want := []string{"devices", "open", "verify", "validate", "check", "partition", "graph", "features", "hotness", "plan", "patches", "comms", "placement", "first batch", "other"}
	if !slices.Equal(names, want) || r.Run.FirstBatchSeconds <= 0 {
		t.Fatalf("first batch after %.3fs, phases %v; want > 0 and %v", r.Run.FirstBatchSeconds, names, want)
	}
}
