package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/internal/sysmem"
)

// child is one run of this test binary as the strata command (TestMain),
// with its exit code, output and peak resident memory.
type child struct {
	code           int
	stdout, stderr string
	maxRSS         int64 // bytes
}

// runChild runs strata args in a child process and waits (with a
// deadline) for it.
func runChild(t *testing.T, args ...string) child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "STRATA_TEST_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("strata %q still running after 2 minutes: killed", args)
	}
	c := child{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		c.maxRSS = int64(ru.Maxrss) << 10 // kilobytes on Linux
	}
	return c
}

// freshProcess makes the calling test run in a new process of this test
// binary (only that test), and reports whether this is it: on Linux a
// child's peak memory (rusage Maxrss) starts at its parent's when it is
// spawned, and this process may be large after other tests; the fresh one
// is not. The caller returns when it is false: the parent checked the
// fresh process's result.
func freshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv("STRATA_FRESH_TEST") == t.Name() {
		return true
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "STRATA_FRESH_TEST="+t.Name())
	out, err := cmd.CombinedOutput()
	if testing.Verbose() || err != nil {
		t.Logf("fresh process:\n%s", out)
	}
	if err != nil {
		t.Fatalf("%s in a fresh process: %v", t.Name(), err)
	}
	return false
}

// Value classes every numeric flag is driven with.
const (
	i63  = "9223372036854775807" // 2^63-1: parses as int64, out of every range
	p63  = "9223372036854775808" // 2^63: overflows int64
	e12  = "1e12"
	bad  = "abc"
	none = ""
)

// flagSpec is one numeric flag (or flag holding a number) of one context.
type flagSpec struct {
	flag string
	// legal decides which values must be accepted; the others must be
	// refused (exit 2, one stderr line naming the flag).
	legal func(v string) bool
	// extra values to drive besides the common ones.
	extra []string
}

// flagCtx is a subcommand (or mode) with the arguments that make a legal
// value fail afterwards in a known way (a missing dataset, a bad back end)
// or run to completion quickly.
type flagCtx struct {
	name     string
	args     func(t *testing.T, dir string) []string // before the flag
	after    []string                                // after the flag (e.g. "--" command)
	sentinel string                                  // stderr of a legal value contains it ("" = exit 0)
	flags    []flagSpec
}

func intRange(lo, hi int64) func(string) bool {
	return func(v string) bool {
		x, err := strconv.ParseInt(v, 10, 64)
		return err == nil && x >= lo && x <= hi
	}
}

func oneOf(vals ...string) func(string) bool {
	return func(v string) bool {
		for _, x := range vals {
			if v == x {
				return true
			}
		}
		return false
	}
}

// floatRange accepts finite numbers in [lo, hi] (or with an open end).
func floatRange(lo, hi float64, openLo, openHi bool) func(string) bool {
	return func(v string) bool {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
		return (x > lo || !openLo && x == lo) && (x < hi || !openHi && x == hi)
	}
}

// fractionsOK accepts three comma-separated fractions in [0, 1] whose sum
// is in (0, 1] (--node-split, --edge-split).
func fractionsOK(v string) bool {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return false
	}
	sum := 0.0
	for _, p := range parts {
		x, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(x) || x < 0 || x > 1 {
			return false
		}
		sum += x
	}
	return sum > 0 && sum <= 1+1e-9
}

func anyUint(v string) bool { _, err := strconv.ParseUint(v, 10, 64); return err == nil }

func durRange(lo, hi time.Duration, openLo bool) func(string) bool {
	return func(v string) bool {
		d, err := time.ParseDuration(v)
		return err == nil && (d > lo || !openLo && d == lo) && d <= hi
	}
}

var (
	intVals   = []string{"-1", "0", "1", e12, p63, i63, bad, none}
	floatVals = []string{"-1", "0", "0.5", "1", e12, "9.3e18", "NaN", "Inf", "-Inf", "1e309", bad, none}
	uintVals  = []string{"-1", "0", p63, "18446744073709551616", bad}
	durVals   = []string{"-1s", "0", "0s", "1s", e12, "2562047h", bad, none}
	byteVals  = []string{"-1", "0", "4096", "64MiB", e12, p63, "NaN", "1e30GiB", bad, "all"}
	fracVals  = []string{"0.6,0.2,0.2", "1,0,0", "0,0,0", "0.5", "0.6,0.6,0.2", "-1,0.5,0.5", "NaN,0,0", "1e309,0,0", "0.5,0.2,0.2,0.1", bad, none}
	fanVals   = []string{"-1", "-1,-1", "10,5", "0,0", "-2,5", "65537,1", "10,abc", e12, p63, "5", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"}
)

// values returns the values spec is driven with, by the kind of flag.
func values(f flagSpec, kind string) []string {
	var v []string
	switch kind {
	case "int":
		v = intVals
	case "float":
		v = floatVals
	case "uint":
		v = uintVals
	case "dur":
		v = durVals
	case "bytes":
		v = byteVals
	case "fanouts":
		v = fanVals
	case "fractions":
		v = fracVals
	}
	return append(append([]string{}, v...), f.extra...)
}

// TestFlagValues drives every numeric flag of every subcommand (train in
// each mode, import, gen, info, partition, launch, bench comm) with
// negative, zero, huge and malformed values in a child process: a refused
// value exits 2 with exactly one stderr line naming the flag; a legal one
// is not refused (it fails later at a known point, or runs); no value
// panics or takes more than 200 MB.
func TestFlagValues(t *testing.T) {
	if raceDetector {
		t.Skip("flag validation only: run by the non-race pass")
	}
	if !freshProcess(t) {
		return
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dataset")
	notDir := writeFile(t, filepath.Join(dir, "a-file"), "x")
	edges := writeFile(t, filepath.Join(dir, "one.txt"), "0 0\n")
	trainArgs := func(mode ...string) func(*testing.T, string) []string {
		return func(*testing.T, string) []string {
			return append([]string{"train", "--quiet", "--dataset", missing}, mode...)
		}
	}
	devList := func(v string) bool {
		rest, ok := strings.CutPrefix(v, "cpu:")
		n, err := strconv.Atoi(rest)
		return ok && err == nil && n >= 1 && n <= maxVirtualDevices
	}
	common := []flagSpec{
		{flag: "layers", legal: intRange(1, 16), extra: []string{"16", "17"}},
		{flag: "hidden", legal: intRange(1, 1<<16), extra: []string{"65536", "65537"}},
		{flag: "dropout", legal: floatRange(0, 1, false, true)},
		{flag: "epochs", legal: intRange(1, 1<<20), extra: []string{"1048577"}},
	}
	kinds := map[string]string{
		"layers": "int", "hidden": "int", "heads": "int", "out-heads": "int", "epochs": "int", "batch-size": "int",
		"eval-batch-size": "int", "checkpoint-every": "int", "staleness-epochs": "int", "eval-every": "int",
		"cache-group": "int", "queue-capacity": "int", "sampler-workers": "int", "profile-ops": "int",
		"dropout": "float", "attn-dropout": "float", "lr": "float", "weight-decay": "float", "momentum": "float",
		"staleness-eps": "float", "seed": "uint", "fanouts": "fanouts", "eval-fanouts": "fanouts",
		"cache": "bytes", "topology-cache": "bytes", "stall-timeout": "dur", "devices": "devices",
		"split": "int", "num-nodes": "int", "node-split": "fractions", "edge-split": "fractions", "split-seed": "uint", "parts": "int", "imbalance": "float",
		"scale": "float", "nodes": "int", "avg-degree": "float", "max-degree": "float", "exponent": "float",
		"classes": "int", "class-skew": "float", "homophily": "float", "features": "int", "noise": "float",
		"train-frac": "float", "val-frac": "float", "test-frac": "float",
		"n": "int", "procs": "int", "master-port": "int", "nnodes": "int", "node-rank": "int", "grace": "dur", "min-bytes": "int", "max-bytes": "int", "factor": "int",
		"repeats": "int", "budget": "int", "timeout": "dur",
		"gpushm-chunk-bytes": "int", "gpushm-slots": "int", "gpushm-workers": "int", "gpushm-chunks": "int",
		"gpushm-device-max": "int", "gpushm-device-chunk": "int",
		"max-message-mb": "int", "max-request-mb": "int", "workers": "int", "max-workers": "int", "prefetch": "int",
		"max-prefetch": "int", "max-streams": "int", "max-samplers": "int", "drain-timeout": "dur",
		"infer-budget": "bytes", "layer": "int",
		"neg-ratio": "int", "hits-k": "int",
		"ring-mb": "int", "release-timeout": "dur", "part": "int", "streams": "int", "machines": "int", "devices-per-machine": "int",
	}
	// gpushm's tuning flags (train --mode fullgraph, bench comm); 0 is the
	// default.
	chunkOK := func(v string) bool {
		x, err := strconv.ParseInt(v, 10, 64)
		return err == nil && (x == 0 || x >= 64<<10 && x <= 64<<20 && x%4096 == 0)
	}
	gpushmFlags := []flagSpec{
		{flag: "gpushm-chunk-bytes", legal: chunkOK, extra: []string{"65536", "65537", "67108864", "67112960"}},
		{flag: "gpushm-slots", legal: func(v string) bool { return v == "0" || intRange(2, 64)(v) }, extra: []string{"2", "64", "65"}},
		{flag: "gpushm-workers", legal: intRange(0, 256), extra: []string{"256", "257"}},
		{flag: "gpushm-chunks", legal: intRange(0, 1024), extra: []string{"1024", "1025"}},
		{flag: "gpushm-device-max", legal: intRange(math.MinInt64, math.MaxInt64)},
		{flag: "gpushm-device-chunk", legal: chunkOK, extra: []string{"4096", "1048576"}},
	}
	fanouts := func(n int) func(string) bool {
		return func(v string) bool {
			parts := strings.Split(v, ",")
			if len(parts) != n {
				return false
			}
			for _, p := range parts {
				x, err := strconv.Atoi(p)
				if err != nil || x != -1 && (x < 1 || x > 1<<16) {
					return false
				}
			}
			return true
		}
	}
	bytesOK := func(v string) bool { _, err := parseBytes("x", v); return err == nil }
	// predict, embed and evaluate: a missing --model fails after the flags.
	modelCmdFlags := []flagSpec{
		{flag: "devices", legal: devList, extra: []string{"cpu:-1", "cpu:0", "cpu:1", "cpu:256", "cpu:257", "cpu:1e12", "cpu:" + p63}},
		{flag: "infer-budget", legal: func(v string) bool { b, err := parseBytes("x", v); return err == nil && b >= 1<<20 }, extra: []string{"1MiB", "1048575"}},
	}
	dsp := []string{"--devices", "cpu:2", "--hidden", "8"}
	ctxs := []flagCtx{
		{name: "train sampled", args: trainArgs("--model", "sage", "--mode", "sampled"), sentinel: "--dataset", flags: append(append([]flagSpec{}, common...),
			flagSpec{flag: "lr", legal: floatRange(0, math.Inf(1), true, true)},
			flagSpec{flag: "weight-decay", legal: floatRange(0, math.Inf(1), false, true)},
			flagSpec{flag: "batch-size", legal: intRange(1, 1<<24), extra: []string{"16777216", "16777217"}},
			flagSpec{flag: "fanouts", legal: fanouts(2)},
			flagSpec{flag: "seed", legal: anyUint},
			flagSpec{flag: "eval-batch-size", legal: intRange(1, 1<<24)},
			flagSpec{flag: "devices", legal: devList, extra: []string{"cpu:-1", "cpu:0", "cpu:1", "cpu:256", "cpu:257", "cpu:1e12", "cpu:" + p63, "cpu:abc", "cuda:" + p63}},
		)},
		{name: "train link", args: trainArgs("--task", "link"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "neg-ratio", legal: intRange(1, 1024), extra: []string{"1024", "1025"}},
			{flag: "hits-k", legal: intRange(1, 1<<20), extra: []string{"1048576", "1048577"}},
			{flag: "batch-size", legal: intRange(1, 1<<24)},
		}},
		{name: "train sampled sgd", args: trainArgs("--optimizer", "sgd"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "momentum", legal: floatRange(0, 1, false, true)},
		}},
		{name: "train sampled eval", args: trainArgs("--eval", "sampled"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "eval-fanouts", legal: fanouts(2)},
			{flag: "eval-batch-size", legal: intRange(1, 1<<24)},
		}},
		{name: "train sampled checkpoint", args: func(t *testing.T, d string) []string {
			return append(trainArgs()(t, d), "--checkpoint", d)
		}, sentinel: "--dataset", flags: []flagSpec{
			{flag: "checkpoint-every", legal: intRange(0, math.MaxInt32)},
		}},
		{name: "train full", args: trainArgs("--model", "gcn", "--mode", "full"), sentinel: "--dataset", flags: append(append([]flagSpec{}, common...),
			flagSpec{flag: "lr", legal: floatRange(0, math.Inf(1), true, true)},
		)},
		{name: "train gat", args: trainArgs("--model", "gat"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "heads", legal: intRange(1, 64), extra: []string{"64", "65"}},
			{flag: "out-heads", legal: intRange(1, 64)},
			{flag: "attn-dropout", legal: floatRange(0, 1, false, true)},
		}},
		{name: "train fullgraph", args: trainArgs("--model", "gcn", "--mode", "fullgraph", "--devices", "cpu:2"), sentinel: "--dataset", flags: append(append(append([]flagSpec{}, common...),
			flagSpec{flag: "eval-every", legal: intRange(1, 1<<20)}), gpushmFlags...,
		)},
		{name: "train fullgraph devices", args: trainArgs("--model", "gcn", "--mode", "fullgraph"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "devices", legal: devList, extra: []string{"cpu:-1", "cpu:0", "cpu:1", "cpu:256", "cpu:257", "cpu:1e12", "cpu:" + p63}},
		}},
		{name: "train fullgraph staleness", args: trainArgs("--model", "gcn", "--mode", "fullgraph", "--devices", "cpu:2", "--staleness"), sentinel: "--dataset", flags: []flagSpec{
			{flag: "staleness-epochs", legal: intRange(1, 1<<20)},
			{flag: "staleness-eps", legal: floatRange(0, math.Inf(1), false, true)},
		}},
		{name: "train dsp", args: trainArgs(dsp...), sentinel: "--dataset", flags: append(append([]flagSpec{}, common...),
			flagSpec{flag: "batch-size", legal: intRange(1, 1<<24)},
			flagSpec{flag: "fanouts", legal: fanouts(2)},
			flagSpec{flag: "cache", legal: bytesOK},
			flagSpec{flag: "topology-cache", legal: bytesOK},
			flagSpec{flag: "queue-capacity", legal: intRange(1, 1024), extra: []string{"1024", "1025"}},
			flagSpec{flag: "stall-timeout", legal: func(v string) bool { return v == "" || durRange(0, 24*time.Hour, true)(v) }, extra: []string{"24h"}},
		)},
		{name: "train dsp replicate", args: trainArgs(append(dsp, "--cache-policy", "replicate")...), sentinel: "--dataset", flags: []flagSpec{
			{flag: "cache-group", legal: oneOf("1", "2"), extra: []string{"2", "3", "1024", "1025"}},
		}},
		{name: "train dsp engine", args: trainArgs(dsp...), sentinel: "--dataset", flags: []flagSpec{
			{flag: "sampler-workers", legal: intRange(1, 8), extra: []string{"8", "9"}},
			// CPU devices have no op profiler: only 0 (off) is legal.
			{flag: "profile-ops", legal: oneOf("0"), extra: []string{"1", "30", "31"}},
			{flag: "eval-every", legal: intRange(1, 1<<20)},
		}},
		{name: "predict", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "predict", "--model", missing, "--out", filepath.Join(d, "p.npy")}
		}, sentinel: "model.json", flags: modelCmdFlags},
		{name: "embed", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "embed", "--model", missing, "--out", filepath.Join(d, "e.npy")}
		}, sentinel: "model.json", flags: append(append([]flagSpec{}, modelCmdFlags...),
			flagSpec{flag: "layer", legal: intRange(0, 16), extra: []string{"16", "17"}})},
		{name: "evaluate", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "evaluate", "--model", missing}
		}, sentinel: "model.json", flags: modelCmdFlags},
		{name: "import", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "import", edges, filepath.Join(d, "out")}
		}, flags: []flagSpec{
			{flag: "split", legal: intRange(0, math.MaxInt32)},
			{flag: "num-nodes", legal: oneOf("0", "1", "5", "2000"), extra: []string{"5", "2000"}},
		}},
		{name: "import splits", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "import", missing, filepath.Join(d, "out")}
		}, sentinel: "no-such-dataset", flags: []flagSpec{
			{flag: "node-split", legal: fractionsOK},
			{flag: "edge-split", legal: fractionsOK},
			{flag: "split-seed", legal: anyUint},
		}},
		{name: "split edges", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "split", missing, "--node-split", "0.6,0.2,0.2"}
		}, sentinel: "no-such-dataset", flags: []flagSpec{
			{flag: "edge-split", legal: fractionsOK},
			{flag: "split-seed", legal: anyUint},
		}},
		{name: "split nodes", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "split", missing, "--edge-split", "0.8,0.1,0.1"}
		}, sentinel: "no-such-dataset", flags: []flagSpec{
			{flag: "node-split", legal: fractionsOK},
		}},
		{name: "gen", args: func(*testing.T, string) []string {
			return []string{"--quiet", "gen", filepath.Join(notDir, "out"), "--preset", "tiny", "--train-frac", "0.1", "--val-frac", "0.1", "--test-frac", "0.1"}
		}, sentinel: "not a directory", flags: []flagSpec{
			{flag: "scale", legal: floatRange(0, 1, true, false), extra: []string{"1e6", "1000001"}},
			{flag: "seed", legal: anyUint},
			{flag: "nodes", legal: oneOf("1500", "3000"), extra: []string{"1500", "3000", "2147483647", "2147483648"}},
			{flag: "avg-degree", legal: floatRange(0, 150, true, true), extra: []string{"4", "150"}},
			{flag: "max-degree", legal: floatRange(10, 2000, true, false), extra: []string{"100", "2000", "2001"}},
			{flag: "exponent", legal: floatRange(1, 10, true, false), extra: []string{"2.5", "10", "10.5"}},
			{flag: "classes", legal: intRange(2, 2000), extra: []string{"3", "2000", "2001", "65537"}},
			{flag: "class-skew", legal: floatRange(0, 2, false, false), extra: []string{"2", "2.5"}},
			{flag: "homophily", legal: floatRange(0, 1, false, false)},
			{flag: "features", legal: intRange(0, 1<<16), extra: []string{"16", "65536", "65537"}},
			{flag: "noise", legal: floatRange(0, 1000, false, false), extra: []string{"1000", "1001"}},
			{flag: "train-frac", legal: floatRange(0, 0.8, false, false), extra: []string{"0.8", "0.9"}},
			{flag: "val-frac", legal: floatRange(0, 0.8, false, false), extra: []string{"0.8", "0.9"}},
			{flag: "test-frac", legal: floatRange(0, 0.8, false, false), extra: []string{"0.8", "0.9"}},
		}},
		{name: "partition", args: func(t *testing.T, d string) []string {
			return []string{"--quiet", "partition", missing, filepath.Join(d, "out")}
		}, sentinel: "no-such-dataset", flags: []flagSpec{
			{flag: "parts", legal: intRange(1, 1<<16), extra: []string{"65536", "65537"}},
			{flag: "imbalance", legal: floatRange(1, 10, false, false), extra: []string{"1.03", "10", "10.5"}},
			{flag: "seed", legal: anyUint},
			// 0 is the plain partition; 1..MaxMachines the per-machine layout.
			{flag: "machines", legal: intRange(0, 1<<10), extra: []string{"1024", "1025"}},
			// Without --machines only the default is legal.
			{flag: "devices-per-machine", legal: intRange(1, 1), extra: []string{"2"}},
		}},
		{name: "launch", args: func(*testing.T, string) []string { return []string{"launch", "--no-prefix", "--n=1"} }, after: []string{"--", "true"}, flags: []flagSpec{
			{flag: "n", legal: intRange(1, 2), extra: []string{"2", "1025"}},
			{flag: "master-port", legal: intRange(0, 65535), extra: []string{"65535", "65536"}},
			{flag: "nnodes", legal: intRange(1, 1), extra: []string{"2"}},    // 2 needs --master-port
			{flag: "node-rank", legal: intRange(0, 0), extra: []string{"1"}}, // one machine
			{flag: "grace", legal: durRange(0, time.Hour, false), extra: []string{"1h1m"}},
		}},
		{name: "bench comm", args: func(t *testing.T, d string) []string {
			return []string{"bench", "comm", "--comm", "bogus", "--max-bytes", "4096", "--json", filepath.Join(d, "b.json")}
		}, sentinel: "bogus", flags: []flagSpec{
			{flag: "procs", legal: intRange(1, 1024), extra: []string{"1024", "1025"}},
			{flag: "min-bytes", legal: intRange(8, 4096), extra: []string{"8", "7"}},
			{flag: "max-bytes", legal: intRange(4096, 1<<20), extra: []string{"4096", "4095", "1048576"}},
			{flag: "factor", legal: intRange(2, 1024), extra: []string{"2", "1025"}},
			{flag: "repeats", legal: intRange(1, 1000), extra: []string{"1001"}},
			{flag: "budget", legal: intRange(1, 1<<40), extra: []string{"1099511627777"}},
			{flag: "timeout", legal: durRange(0, 24*time.Hour, true), extra: []string{"24h", "24h1s"}},
		}},
		{name: "serve", args: func(*testing.T, string) []string {
			return []string{"serve", "--quiet", "--dataset", missing, "--device", "cpu", "--listen", "127.0.0.1:0"}
		}, sentinel: "no-such-dataset", flags: []flagSpec{
			{flag: "num-nodes", legal: intRange(0, dataset.MaxNodes), extra: []string{"2147483647", "2147483648"}},
			{flag: "max-message-mb", legal: intRange(1, 2047), extra: []string{"2047", "2048"}},
			{flag: "max-request-mb", legal: intRange(1, 2047), extra: []string{"2047", "2048"}},
			{flag: "workers", legal: intRange(1, 64), extra: []string{"64", "65"}},
			{flag: "max-workers", legal: intRange(1, 1024), extra: []string{"1024", "1025"}},
			// --prefetch is 4 unless set: a smaller maximum is refused.
			{flag: "prefetch", legal: intRange(1, 64), extra: []string{"64", "65"}},
			{flag: "max-prefetch", legal: intRange(4, 1024), extra: []string{"3", "4", "1024", "1025"}},
			{flag: "max-streams", legal: intRange(1, 1<<20), extra: []string{"1048576", "1048577"}},
			{flag: "max-samplers", legal: intRange(1, 1024), extra: []string{"1024", "1025"}},
			{flag: "drain-timeout", legal: durRange(0, 24*time.Hour, false), extra: []string{"24h", "24h1s"}},
			{flag: "ring-mb", legal: intRange(1, 1<<20), extra: []string{"1048576", "1048577"}},
			{flag: "release-timeout", legal: durRange(time.Second, 24*time.Hour, false), extra: []string{"999ms", "24h", "24h1s"}},
			{flag: "part", legal: intRange(-1, 1<<16-1), extra: []string{"-2", "65535", "65536"}},
			{flag: "devices", legal: devList, extra: []string{"cpu:-1", "cpu:0", "cpu:1", "cpu:256", "cpu:257", "cpu:1e12", "cpu:" + p63, "cpu:abc", "cuda:" + p63}},
		}},
		{name: "relay", args: func(_ *testing.T, d string) []string {
			return []string{"relay", "--quiet", "--upstream", "127.0.0.1:1", "--ring-dir", filepath.Join(d, "no-such-ring"), "--listen", "127.0.0.1:0"}
		}, sentinel: "no-such-ring", flags: []flagSpec{
			{flag: "streams", legal: intRange(1, 16), extra: []string{"16", "17"}},
			{flag: "ring-mb", legal: intRange(1, 1<<20), extra: []string{"1048576", "1048577"}},
			{flag: "max-message-mb", legal: intRange(1, 2047), extra: []string{"2047", "2048"}},
			{flag: "release-timeout", legal: durRange(time.Second, 24*time.Hour, false), extra: []string{"999ms", "24h", "24h1s"}},
			{flag: "timeout", legal: durRange(time.Second, 24*time.Hour, false), extra: []string{"999ms", "24h", "24h1s"}},
			{flag: "drain-timeout", legal: durRange(0, 24*time.Hour, false), extra: []string{"24h", "24h1s"}},
		}},
		{name: "bench comm gpushm", args: func(t *testing.T, d string) []string {
			return []string{"bench", "comm", "--comm", "bogus", "--max-bytes", "4096", "--json", filepath.Join(d, "b.json")}
		}, sentinel: "bogus", flags: gpushmFlags},
	}
	// Importing 2e9 nodes is refused where the machine cannot hold it.
	if b, ok := sysmem.Available(); ok && b.Bytes < importer.EstimateBytes(2_000_000_000, 1, false) {
		for i := range ctxs {
			if ctxs[i].name == "import" {
				ctxs[i].flags[1].extra = append(ctxs[i].flags[1].extra, "2000000000")
			}
		}
	}

	type run struct {
		ctx   *flagCtx
		flag  string
		value string
		legal bool
	}
	var runs []run
	for i := range ctxs {
		c := &ctxs[i]
		for _, f := range c.flags {
			kind := kinds[f.flag]
			if kind == "" {
				t.Fatalf("%s: no kind for --%s", c.name, f.flag)
			}
			seen := map[string]bool{}
			for _, v := range values(f, kind) {
				if !seen[v] {
					seen[v] = true
					runs = append(runs, run{c, f.flag, v, f.legal(v)})
				}
			}
		}
	}
	// info has no numeric flag: its argument gets the same values.
	for _, v := range []string{"-1", "0", e12, p63, bad} {
		runs = append(runs, run{&flagCtx{name: "info", args: func(*testing.T, string) []string { return []string{"info"} }}, "", v, false})
	}
	if testing.Short() { // a sample; the full table runs without -short
		var sample []run
		for i, r := range runs {
			if i%5 == 0 || r.ctx.name == "info" {
				sample = append(sample, r)
			}
		}
		runs = sample
	}
	sem := make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	var mu sync.Mutex
	var legalCount, refusedCount int
	var peak int64
	var peakArgs []string
	t.Run("values", func(t *testing.T) {
		for _, r := range runs {
			name := fmt.Sprintf("%s/--%s=%s", r.ctx.name, r.flag, r.value)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				d := t.TempDir()
				args := r.ctx.args(t, d)
				if r.flag == "" {
					args = append(args, r.value)
				} else {
					args = append(args, "--"+r.flag+"="+r.value)
				}
				args = append(args, r.ctx.after...)
				c := runChild(t, args...)
				if strings.Contains(c.stderr, "panic") || strings.Contains(c.stderr, "goroutine ") {
					t.Fatalf("%q panicked:\n%s", args, c.stderr)
				}
				if c.maxRSS > 200<<20 {
					t.Errorf("%q: peak memory %s, want under 200 MB", args, sysmem.Format(c.maxRSS))
				}
				dash := "--" + r.flag
				if len(r.flag) == 1 {
					dash = "-" + r.flag
				}
				mu.Lock()
				if c.maxRSS > peak {
					peak, peakArgs = c.maxRSS, args
				}
				if r.legal {
					legalCount++
				} else {
					refusedCount++
				}
				mu.Unlock()
				switch {
				case r.flag == "": // info's argument
					if c.code != 2 || strings.Count(c.stderr, "\n") != 1 || !strings.Contains(c.stderr, r.value) {
						t.Errorf("%q: exit %d, stderr %q: want exit 2 and one line naming %q", args, c.code, c.stderr, r.value)
					}
				case !r.legal:
					if c.code != 2 || strings.Count(c.stderr, "\n") != 1 || !strings.Contains(c.stderr, dash) {
						t.Errorf("%q: exit %d, stderr %q: want exit 2 and one line naming %s", args, c.code, c.stderr, dash)
					}
				case r.ctx.sentinel == "":
					if c.code != 0 {
						t.Errorf("%q: legal value refused: exit %d, stderr %q", args, c.code, c.stderr)
					}
				default:
					if !strings.Contains(c.stderr, r.ctx.sentinel) || strings.Contains(c.stderr, dash+" ") || strings.Contains(c.stderr, dash+":") {
						t.Errorf("%q: legal value refused: exit %d, stderr %q (want it to fail later, at %q)", args, c.code, c.stderr, r.ctx.sentinel)
					}
				}
			})
		}
	})
	t.Logf("%d values: %d legal, %d refused; largest peak memory %s (%q)", len(runs), legalCount, refusedCount, sysmem.Format(peak), peakArgs)

	// Every numeric flag of every subcommand is in the table.
	covered := map[string]bool{}
	for _, c := range ctxs {
		cmd := strings.Fields(c.name)[0]
		if strings.HasPrefix(c.name, "bench") {
			cmd = "bench comm"
		}
		for _, f := range c.flags {
			covered[cmd+" --"+f.flag] = true
		}
	}
	var missingFlags []string
	for _, f := range numericFlags(t) {
		if !covered[f] {
			missingFlags = append(missingFlags, f)
		}
	}
	sort.Strings(missingFlags)
	if len(missingFlags) > 0 {
		t.Errorf("numeric flags not in the table: %v", missingFlags)
	}
}

// numericFlags lists "command --flag" for every flag of every subcommand
// that holds a number (ints, floats, durations, lists of ints, and the
// strings that hold byte counts, durations or device counts).
func numericFlags(t *testing.T) []string {
	var c cli
	k, err := kong.New(&c, kong.Vars{"version": "x", "builtins": "x", "presets": "x", "kinds": "x", "devices": "x"})
	if err != nil {
		t.Fatal(err)
	}
	numericStrings := map[string]bool{"cache": true, "topology-cache": true, "stall-timeout": true, "devices": true, "infer-budget": true}
	dur := reflect.TypeFor[time.Duration]()
	var out []string
	var walk func(n *kong.Node, path string)
	walk = func(n *kong.Node, path string) {
		for _, f := range n.Flags {
			typ := f.Target.Type()
			for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
				typ = typ.Elem()
			}
			switch {
			case typ == dur, numericStrings[f.Name]:
			case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Float64:
			default:
				continue
			}
			out = append(out, path+" --"+f.Name)
		}
		for _, ch := range n.Children {
			p := ch.Name
			if path != "" {
				p = path + " " + ch.Name
			}
			walk(ch, p)
		}
	}
	walk(k.Model.Node, "")
	if len(out) < 40 {
		t.Fatalf("found only %d numeric flags: %v", len(out), out)
	}
	return out
}

// TestLaunchSecuritySettingsAreUsageErrors: security settings that cannot
// work (a certificate without its key and CA, a non-loopback master
// without TLS) stop 'strata launch' with exit 2 and one line, before any
// rank starts.
func TestLaunchSecuritySettingsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"launch", "-n", "2", "--tls-cert", "/nonexistent.pem", "--", "true"},
		{"launch", "-n", "2", "--master-addr", "10.1.2.3", "--", "true"},
	} {
		c := runChild(t, args...)
		lines := strings.Split(strings.TrimSpace(c.stderr), "\n")
		if c.code != 2 || len(lines) != 1 || !strings.Contains(c.stderr, "--tls-") {
			t.Errorf("strata %q: exit %d, stderr %q; want exit 2 and one line naming the --tls- flags", args, c.code, c.stderr)
		}
	}
}
