package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// skipIfCUDA skips tests of what happens without a GPU driver.
func skipIfCUDA(t *testing.T) {
	t.Helper()
	if b, err := openDevice("cuda"); err == nil {
		t.Skipf("a CUDA device is usable here (%s)", b.Name())
	}
	if err := cudaDriverErr(); err == nil || !notInstalled(err) {
		t.Skipf("libcuda is installed here (%v): the notice tests need a machine without it", err)
	}
}

// TestNoCUDANoticeUnlessAsked: on a machine without libcuda, a run that
// did not ask for CUDA (--device auto, the default, or cpu) says nothing
// about it; one that asks (--device cuda, --devices cuda:...) fails with
// the notice once; `strata info` prints it once.
func TestNoCUDANoticeUnlessAsked(t *testing.T) {
	skipIfCUDA(t)
	var note strings.Builder
	b, err := openDeviceNote("auto", &note)
	if err != nil || b.Name() != "cpu" || note.Len() != 0 {
		t.Fatalf("auto device: %v, %v, note %q: want cpu and no note", b, err, note.String())
	}
	for _, args := range [][]string{
		{"train", "--epochs", "1", "--model", "gcn"},
		{"train", "--epochs", "1", "--model", "gcn", "--device", "cpu"},
		{"train", "--epochs", "1", "--devices", "cpu:2", "--hidden", "8"},
		{"train", "--epochs", "1", "--mode", "fullgraph", "--model", "gcn", "--devices", "cpu:2"},
	} {
		code, out, errOut := strata(t, args...)
		if code != 0 || strings.Contains(errOut, "libcuda") || strings.Contains(errOut, "STRATA_CUDA_PATH") || !strings.Contains(out, "test accuracy") {
			t.Errorf("%v: exit %d, stderr mentions CUDA or fails:\n%s", args, code, errOut)
		}
	}
	for _, args := range [][]string{
		{"train", "--quiet", "--device", "cuda"},
		{"train", "--quiet", "--device", "cuda:1"},
		{"train", "--quiet", "--devices", "cuda:0,1"},
		{"train", "--quiet", "--mode", "fullgraph", "--model", "gcn", "--devices", "cuda:0,1"},
	} {
		code, _, errOut := strata(t, args...)
		if code != 1 || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, "libcuda not found") != 1 || strings.Count(errOut, "STRATA_CUDA_PATH") != 1 {
			t.Errorf("%v: exit %d, stderr %q: want exit 1 and the notice once, on one line", args, code, errOut)
		}
	}
	code, out, _ := strata(t, "info")
	if code != 0 {
		t.Fatalf("info: exit %d", code)
	}
	for _, once := range []string{"STRATA_CUDA_PATH", "libcuda.so.1", "/usr/lib64"} {
		if strings.Count(out, once) > 1 {
			t.Errorf("info prints %q %d times:\n%s", once, strings.Count(out, once), out)
		}
	}
	if strings.Count(out, "STRATA_CUDA_PATH") != 1 || !strings.Contains(out, "libcuda    not found") {
		t.Errorf("info should say once that libcuda is not found and where it looked:\n%s", out)
	}
}

// TestDeviceListsOneParser: sampled and fullgraph modes read --devices with
// the same parser; a cuda list without CUDA fails the same way in both
// (the device does not open: not a parse error), and cpu lists train in
// both.
func TestDeviceListsOneParser(t *testing.T) {
	for _, tc := range []struct {
		list  string
		kind  string
		specs []string
	}{
		{"cpu:3", "cpu", []string{"cpu", "cpu", "cpu"}},
		{"cpu", "cpu", []string{"cpu"}},
		{"cuda:0,1,2,3", "cuda", []string{"cuda:0", "cuda:1", "cuda:2", "cuda:3"}},
		{"cuda:0,cuda:2", "cuda", []string{"cuda:0", "cuda:2"}},
		{" cuda , 3 ", "cuda", []string{"cuda", "cuda:3"}},
	} {
		set, err := parseDevices(tc.list)
		if err != nil || set.Kind != tc.kind || !slices.Equal(set.Specs, tc.specs) {
			t.Errorf("parseDevices(%q) = %+v, %v; want kind %s specs %v", tc.list, set, err, tc.kind, tc.specs)
		}
	}
	for _, bad := range []string{"", "cpu:0", "cpu:257", "cpu:x", "cuda:0,0", "cuda,0", "auto", "cpu:1,cuda:0", "cuda:0,,1", "1,2", "cuda:-1"} {
		if set, err := parseDevices(bad); err == nil {
			t.Errorf("parseDevices(%q) = %+v, want an error", bad, set)
		}
	}

	sampled := []string{"train", "--quiet", "--epochs", "1", "--model", "gcn", "--mode", "sampled", "--hidden", "8"}
	full := []string{"train", "--quiet", "--epochs", "1", "--model", "gcn", "--mode", "fullgraph", "--hidden", "8"}
	with := func(base []string, more ...string) []string { return append(slices.Clone(base), more...) }
	if _, err := openDevice("cuda"); err != nil {
		for _, list := range []string{"cuda:0,1,2,3", "cuda:0,cuda:1", "cuda:1"} {
			c1, _, e1 := strata(t, with(sampled, "--devices", list)...)
			c2, _, e2 := strata(t, with(full, "--devices", list)...)
			if c1 != 1 || c1 != c2 || e1 != e2 || !strings.Contains(e1, "--devices "+list+": cuda: cannot open") {
				t.Errorf("--devices %s: sampled exit %d %q, fullgraph exit %d %q: want the same 'cannot open' error (exit 1)", list, c1, e1, c2, e2)
			}
		}
	}
	for _, list := range []string{"cpu:2", "cpu"} {
		for _, base := range [][]string{sampled, full} {
			if code, out, errOut := strata(t, with(base, "--devices", list)...); code != 0 || !strings.Contains(out, "test accuracy") {
				t.Errorf("%v --devices %s: exit %d, %s", base, list, code, errOut)
			}
		}
	}
	for _, list := range []string{"cpu:0", "cpu:300", "cuda:0,0", "tpu:0,1", "cpu,cuda"} {
		c1, _, e1 := strata(t, with(sampled, "--devices", list)...)
		c2, _, e2 := strata(t, with(full, "--devices", list)...)
		if c1 != 2 || c2 != 2 || e1 != e2 || !strings.Contains(e1, "--devices") {
			t.Errorf("--devices %s: sampled exit %d %q, fullgraph exit %d %q: want the same usage error", list, c1, e1, c2, e2)
		}
	}
	code, out, _ := strata(t, "train", "--help")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "one syntax for both modes: cpu:N for N CPU virtual devices") {
		t.Errorf("train --help does not document the --devices syntax:\n%s", out)
	}
}

// TestDSPFlagsOnOneDevice: --scheme, --replace, --weighted (and the other
// DSP engine flags) without --devices train on the one device of --device,
// as --devices cpu:1 does, with the same numbers; in full mode they are
// refused naming sampled mode, never suggesting --mode fullgraph.
func TestDSPFlagsOnOneDevice(t *testing.T) {
	dir := t.TempDir()
	base := []string{"train", "--quiet", "--epochs", "2", "--hidden", "8", "--scheme", "layer", "--replace"}
	one, explicit := filepath.Join(dir, "one.json"), filepath.Join(dir, "explicit.json")
	if code, _, errOut := strata(t, append(slices.Clone(base), "--report", one)...); code != 0 {
		t.Fatalf("without --devices: exit %d: %s", code, errOut)
	}
	if code, _, errOut := strata(t, append(slices.Clone(base), "--devices", "cpu:1", "--report", explicit)...); code != 0 {
		t.Fatalf("--devices cpu:1: exit %d: %s", code, errOut)
	}
	type rep struct {
		Epochs []struct {
			Loss float64 `json:"loss"`
		} `json:"epochs"`
		DSP struct {
			Devices int    `json:"devices"`
			Scheme  string `json:"scheme"`
		} `json:"dsp"`
	}
	read := func(p string) rep {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r rep
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := read(one), read(explicit)
	if len(a.Epochs) != 2 || len(b.Epochs) != 2 || a.Epochs[1].Loss != b.Epochs[1].Loss {
		t.Fatalf("one device %+v, --devices cpu:1 %+v: want the same losses", a, b)
	}
	if d := a.DSP; d.Devices != 1 || d.Scheme != "layer" {
		t.Errorf("without --devices: %+v, want the DSP engine on one device, layer-wise", d)
	}
	// Cora has no edge weights: --weighted fails alike with and without --devices.
	c1, _, e1 := strata(t, "train", "--quiet", "--epochs", "1", "--weighted")
	c2, _, e2 := strata(t, "train", "--quiet", "--epochs", "1", "--weighted", "--devices", "cpu:1")
	if c1 != c2 || e1 != e2 || !strings.Contains(e1, "needs edge weights") {
		t.Errorf("--weighted: exit %d %q; with --devices cpu:1: exit %d %q", c1, e1, c2, e2)
	}
	for _, flag := range []string{"--scheme=layer", "--replace", "--weighted"} {
		code, _, errOut := strata(t, "train", "--quiet", "--model", "gcn", flag)
		if code != 2 || strings.Contains(errOut, "fullgraph") || !strings.Contains(errOut, "sampled mode") {
			t.Errorf("gcn %s: exit %d, %q: want exit 2 naming sampled mode, not --mode fullgraph", flag, code, errOut)
		}
	}
}
