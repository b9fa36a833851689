package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/tensor/backend"
)

// clearRunEnv unsets every variable of runEnv for the test.
func clearRunEnv(t *testing.T) {
	t.Helper()
	for _, v := range runEnv {
		t.Setenv(v.name, "")
	}
}

// parseTrain parses a 'strata train' command line as run does.
func parseTrain(t *testing.T, args ...string) *trainCmd {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Vars{"builtins": "", "presets": "", "kinds": "", "devices": ""}, kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"train"}, args...)); err != nil {
		t.Fatal(err)
	}
	return &c.Train
}

// TestPrecisionFlag: --precision (or the deprecated --tf32, which warns)
// sets the precision every device of the run opens with, CPU back ends
// included, only for the run; --tf32 with another --precision is a usage
// error; STRATA_CUDA_TF32 is no longer read, and said so.
func TestPrecisionFlag(t *testing.T) {
	clearRunEnv(t)
	for _, tc := range []struct {
		args []string
		env  string
		want backend.Precision
		warn bool
	}{
		{nil, "", backend.FP32, false}, {[]string{"--precision", "bf16"}, "", backend.BF16, false},
		{[]string{"--precision", "tf32"}, "", backend.TF32, false}, {[]string{"--tf32"}, "", backend.TF32, true},
		{[]string{"--tf32", "--precision", "tf32"}, "", backend.TF32, true}, {nil, "1", backend.FP32, false},
	} {
		t.Setenv(envTF32, tc.env)
		c := parseTrain(t, tc.args...)
		var errb bytes.Buffer
		restore, err := c.useEnvironment(&env{stdout: &errb, stderr: &errb, quiet: true})
		if err != nil {
			t.Fatalf("%v %s=%q: %v", tc.args, envTF32, tc.env, err)
		}
		for _, spec := range []string{"cpu"} {
			b, err := openBackend(spec)
			if err != nil {
				t.Fatal(err)
			}
			if b.Precision() != tc.want {
				t.Errorf("%v: %s opens with precision %s, want %s", tc.args, spec, b.Precision(), tc.want)
			}
		}
		if warned := strings.Contains(errb.String(), "--tf32 is deprecated"); warned != tc.warn {
			t.Errorf("%v: deprecation warning %v, want %v (%q)", tc.args, warned, tc.warn, errb.String())
		}
		if noted := strings.Contains(errb.String(), "environment: "+envTF32+"=") && strings.Contains(errb.String(), "no longer read"); noted != (tc.env != "") {
			t.Errorf("%s=%q: notice %q", envTF32, tc.env, errb.String())
		}
		restore()
		if devicePrecision != backend.FP32 {
			t.Errorf("%v: precision %s left set after the run", tc.args, devicePrecision)
		}
	}
	t.Setenv(envTF32, "")
	code, _, errOut := strata(t, "--quiet", "train", "--device", "cpu", "--epochs", "1", "--tf32", "--precision", "bf16")
	if code != 2 || !strings.Contains(errOut, "--tf32") || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
		t.Errorf("--tf32 --precision bf16: exit %d, %q; want 2 naming --tf32", code, errOut)
	}
	if code, _, errOut := strata(t, "--quiet", "train", "--device", "cpu", "--epochs", "1", "--precision", "fp16"); code != 2 || !strings.Contains(errOut, "--precision") {
		t.Errorf("--precision fp16: exit %d, %q; want 2 naming --precision", code, errOut)
	}
}

// TestPrecisionRuns: every mode trains at --precision bf16 on CPU
// devices and reports the precision; its final loss differs from fp32's
// (the products and features really are rounded) but stays close to it.
func TestPrecisionRuns(t *testing.T) {
	skipUnderRace(t)
	clearRunEnv(t)
	dir := t.TempDir()
	type rep struct {
		Config struct {
			Precision string `json:"precision"`
		} `json:"config"`
		Epochs []struct {
			Loss float64 `json:"loss"`
		} `json:"epochs"`
	}
	read := func(p string) rep {
		t.Helper()
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
	losses := map[string]float64{}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"sampled", []string{"--epochs", "2"}},
		{"fullgraph", []string{"--model", "gcn", "--mode", "fullgraph", "--devices", "cpu:2", "--epochs", "3"}},
		{"dsp", []string{"--devices", "cpu:2", "--hidden", "8", "--epochs", "1"}},
	} {
		for _, p := range []string{"fp32", "bf16"} {
			out := filepath.Join(dir, tc.name+"-"+p+".json")
			args := append([]string{"--quiet", "train", "--precision", p, "--report", out}, tc.args...)
			if code, _, errOut := strata(t, args...); code != 0 {
				t.Fatalf("%s --precision %s: exit %d: %s", tc.name, p, code, errOut)
			}
			r := read(out)
			if r.Config.Precision != p || len(r.Epochs) == 0 {
				t.Fatalf("%s --precision %s: report says precision %q, %d epochs", tc.name, p, r.Config.Precision, len(r.Epochs))
			}
			losses[tc.name+p] = r.Epochs[len(r.Epochs)-1].Loss
		}
	}
	t.Logf("final losses: %v", losses)
	for _, mode := range []string{"sampled", "fullgraph", "dsp"} {
		a, b := losses[mode+"fp32"], losses[mode+"bf16"]
		if a == b || math.Abs(a-b) > 0.05*math.Abs(a) {
			t.Errorf("%s final loss: fp32 %v, bf16 %v: want different but within 5%%", mode, a, b)
		}
	}
}

// TestGPUShmFlags: the --gpushm-* flags reach gpushm.Options (below them,
// STRATA_GPUSHM_* for the fields they leave unset), are checked (exit 2
// naming the flag or the variable) and apply to several devices with
// --comm gpushm (fullgraph mode: or auto) only.
func TestGPUShmFlags(t *testing.T) {
	clearRunEnv(t)
	t.Setenv(gpushm.EnvWorkers, "3")
	c := parseTrain(t, "--mode", "fullgraph", "--gpushm-slots", "4", "--gpushm-chunk-bytes", "8388608", "--gpushm-chunks", "2",
		"--gpushm-device-max=-1", "--gpushm-device-chunk", "1048576", "--gpushm-async", "--gpushm-idle", "gosleep")
	o, used, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{})
	want := gpushm.Options{ChunkBytes: 8 << 20, Slots: 4, Workers: 3, Chunks: 2, DeviceMax: -1, DeviceChunk: 1 << 20, Async: true, Idle: gpushm.IdleGoSleep}
	if err != nil || o != want || len(used) != 1 {
		t.Errorf("options %+v (variables %v), %v; want %+v", o, used, err, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "fullgraph", "--devices", "cpu:2", "--gpushm-slots", "1"}, "--gpushm-slots 1"},
		{[]string{"--mode", "fullgraph", "--devices", "cpu:2", "--gpushm-idle", "nap"}, "--gpushm-idle"},
		{[]string{"--mode", "fullgraph", "--devices", "cpu:2", "--comm", "host", "--gpushm-slots", "4"}, "--comm gpushm"},
		{[]string{"--gpushm-async"}, "--gpushm-async needs several devices"},
		{[]string{"--devices", "cpu:2", "--gpushm-workers", "2"}, "--gpushm-workers applies to --comm gpushm, not --comm auto"},
		{[]string{"--devices", "cpu:2", "--comm", "gpushm", "--gpushm-slots", "1"}, "--gpushm-slots 1"},
	} {
		code, _, errOut := strata(t, append([]string{"--quiet", "train", "--epochs", "1"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	t.Setenv(gpushm.EnvSlots, "1")
	code, _, errOut := strata(t, "--quiet", "train", "--mode", "fullgraph", "--devices", "cpu:2", "--epochs", "1")
	if code != 2 || !strings.Contains(errOut, gpushm.EnvSlots+"=1: want") || !strings.Contains(errOut, "environment: "+gpushm.EnvSlots) {
		t.Errorf("%s=1: exit %d, %q; want 2 naming it, and the notice", gpushm.EnvSlots, code, errOut)
	}
}

// TestNoteEnv: every variable of runEnv that is set gets one line; a
// setting kept for compatibility names its flag.
func TestNoteEnv(t *testing.T) {
	clearRunEnv(t)
	var b bytes.Buffer
	noteEnv(&b)
	if b.Len() != 0 {
		t.Fatalf("nothing set: %q", b.String())
	}
	t.Setenv(gpushm.EnvDeviceMax, "-1")
	t.Setenv(nccl.EnvAsync, "0")
	t.Setenv("STRATA_DSP_STAGE_PRIORITY", "0")
	noteEnv(&b)
	out := b.String()
	if strings.Count(out, "\n") != 3 || !strings.Contains(out, gpushm.EnvDeviceMax+`="-1" (gpushm: as --gpushm-device-max`) ||
		!strings.Contains(out, nccl.EnvAsync+`="0" (not read`) || !strings.Contains(out, `STRATA_DSP_STAGE_PRIORITY="0"`) {
		t.Errorf("notice:\n%s", out)
	}
}

// TestHelpNamesConfiguration: strata --help points at the table, and
// train --help lists the flags that replaced variables.
func TestHelpNamesConfiguration(t *testing.T) {
	if code, out, _ := strata(t, "--help"); code != 0 || !strings.Contains(out, "docs/configuration.md") {
		t.Errorf("--help: exit %d, no docs/configuration.md:\n%s", code, out)
	}
	code, out, _ := strata(t, "train", "--help")
	for _, f := range []string{"--precision", "--gpushm-chunk-bytes", "--gpushm-device-max", "--gpushm-idle"} {
		if code != 0 || !strings.Contains(out, f) {
			t.Errorf("train --help: exit %d, no %s", code, f)
		}
	}
}
