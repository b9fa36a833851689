package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
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

// TestTF32Flag: --tf32 (or STRATA_CUDA_TF32, the same switch) reaches the
// options every CUDA device of the run opens with, only for the run; a
// variable that changes the run is announced; --tf32 on the CPU is a
// usage error.
func TestTF32Flag(t *testing.T) {
	clearRunEnv(t)
	for _, tc := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", false}, {[]string{"--tf32"}, "", true}, {nil, "1", true}, {[]string{"--tf32"}, "0", true},
	} {
		t.Setenv(envTF32, tc.env)
		c := parseTrain(t, tc.args...)
		var errb bytes.Buffer
		restore, err := c.useEnvironment(&env{stdout: &errb, stderr: &errb, quiet: true})
		if err != nil {
			t.Fatalf("%v %s=%q: %v", tc.args, envTF32, tc.env, err)
		}
		if cudaOptions.TF32 != tc.want {
			t.Errorf("%v %s=%q: CUDA devices open with TF32 %v, want %v", tc.args, envTF32, tc.env, cudaOptions.TF32, tc.want)
		}
		if noted := strings.Contains(errb.String(), "environment: "+envTF32+"="); noted != (tc.env != "") {
			t.Errorf("%s=%q: notice %q", envTF32, tc.env, errb.String())
		}
		restore()
		if cudaOptions.TF32 {
			t.Errorf("%v: TF32 left on after the run", tc.args)
		}
	}
	t.Setenv(envTF32, "")
	for _, args := range [][]string{{"--device", "cpu"}, {"--mode", "fullgraph", "--devices", "cpu:2"}} {
		code, _, errOut := strata(t, append(append([]string{"--quiet", "train", "--tf32"}, args...), "--epochs", "1")...)
		if code != 2 || !strings.Contains(errOut, "--tf32") {
			t.Errorf("--tf32 %v: exit %d, %q; want 2 naming --tf32", args, code, errOut)
		}
	}
	t.Setenv(envTF32, "sometimes")
	if code, _, errOut := strata(t, "--quiet", "train", "--device", "cpu", "--epochs", "1"); code != 2 || !strings.Contains(errOut, envTF32) {
		t.Errorf("%s=sometimes: exit %d, %q; want 2 naming it", envTF32, code, errOut)
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
	for _, f := range []string{"--tf32", "--gpushm-chunk-bytes", "--gpushm-device-max", "--gpushm-idle"} {
		if code != 0 || !strings.Contains(out, f) {
			t.Errorf("train --help: exit %d, no %s", code, f)
		}
	}
}
