package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/partition"
)

func TestTrainFullGraph(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "out", "report.json")
	code, out, errOut := strata(t, "--quiet", "train", "--mode", "fullgraph", "--model", "gcn", "--devices", "cpu:3",
		"--epochs", "4", "--staleness", "--staleness-epochs", "2", "--staleness-eps", "0.8", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"test accuracy", "broadcasts", "3 device(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rep, err := fullgraph.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "full" || len(rep.Devices) != 3 || len(rep.Epochs) != 4 || rep.Config.Staleness.EpochBound != 2 ||
		rep.Config.Staleness.Epsilon != 0.8 || rep.Config.Masks != fullgraph.MasksGlobal || rep.Comm.Broadcasts == 0 ||
		len(rep.Memory.ActivationBytes) != 2 {
		t.Errorf("report: mode %s, devices %v, %d epochs, config %+v, comm %d broadcasts", rep.Mode, rep.Devices, len(rep.Epochs),
			rep.Config, rep.Comm.Broadcasts)
	}
	// GAT on one device, with a plot.
	plot := filepath.Join(dir, "gat.svg")
	code, out, errOut = strata(t, "--quiet", "train", "--mode", "fullgraph", "--model", "gat", "--epochs", "2",
		"--device", "cpu", "--plot", plot)
	if code != 0 {
		t.Fatalf("gat: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestTrainFullGraphGATDevices: GAT trains on several devices (the
// decentralized engine; it used to be refused), exactly and with
// skip-broadcast, its broadcasts carrying the 8 x 8 projected features.
func TestTrainFullGraphGATDevices(t *testing.T) {
	dir := t.TempDir()
	for _, extra := range [][]string{nil, {"--staleness"}} {
		report := filepath.Join(dir, "gat.json")
		args := append([]string{"--quiet", "train", "--mode", "fullgraph", "--model", "gat", "--devices", "cpu:2",
			"--epochs", "3", "--report", report}, extra...)
		code, out, errOut := strata(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", extra, code, out, errOut)
		}
		if !strings.Contains(out, "test accuracy") || !strings.Contains(out, "2 device(s)") {
			t.Errorf("%v: output:\n%s", extra, out)
		}
		rep, err := fullgraph.ReadReport(report)
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Comm
		if rep.Model != "gat" || rep.Engine != "distributed" || len(rep.Devices) != 2 || len(rep.Epochs) != 3 ||
			c.Broadcasts == 0 || c.GradBytesSent == 0 || len(c.Blocks) == 0 || c.Blocks[0].Width != 64 ||
			rep.Config.Staleness.Enabled != (extra != nil) {
			t.Errorf("%v: report: model %s, engine %s, devices %v, %d epochs, comm %+v", extra, rep.Model, rep.Engine,
				rep.Devices, len(rep.Epochs), c)
		}
	}
}

func TestTrainFullGraphUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices", "cpu:0"}, "cpu:N"},
		{[]string{"--devices", "cpu,cpu"}, "repeated"},
		{[]string{"--batch-size", "8"}, "--batch-size"},
		{[]string{"--momentum", "0.5"}, "--momentum: only sgd uses momentum"},
		{[]string{"--staleness-eps", "0.1"}, "need --staleness"},
		{[]string{"--staleness", "--staleness-epochs", "0"}, "--staleness-epochs 0"},
		{[]string{"--staleness", "--checkpoint", "x"}, "--checkpoint with --staleness"},
		{[]string{"--resume"}, "--resume needs --checkpoint"},
		{[]string{"--devices", "cpu:2", "--comm", "nccl"}, "distinct CUDA GPUs"},
		{[]string{"--comm", "mpi"}, "--comm"},
	} {
		args := append([]string{"--quiet", "train", "--mode", "fullgraph", "--model", "gcn"}, tc.args...)
		code, _, errOut := strata(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q (want 2 and %q)", tc.args, code, errOut, tc.want)
		}
	}
}

// TestTrainFullGraphPartitionFile: a partition written by 'strata
// partition' drives the blocks (host communication on CPU devices); a
// file with another part count is refused.
func TestTrainFullGraphPartitionFile(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "g")
	if code, _, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errOut)
	}
	p := filepath.Join(dir, "p")
	if code, _, errOut := strata(t, "--quiet", "partition", g, p, "-k", "3"); code != 0 {
		t.Fatalf("partition: exit %d: %s", code, errOut)
	}
	file := filepath.Join(p, "partition.bin")
	report := filepath.Join(dir, "r.json")
	code, out, errOut := strata(t, "--quiet", "train", "--mode", "fullgraph", "--model", "sage", "--dataset", g, "--devices", "cpu:3",
		"--epochs", "2", "--partition-file", file, "--comm", "host", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep, err := fullgraph.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := partition.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := saved.Book.Offsets()
	for b, size := range rep.Partition.Sizes {
		if size != want[b+1]-want[b] {
			t.Fatalf("block sizes %v, partition file %v", rep.Partition.Sizes, want)
		}
	}
	if rep.Partition.Method != "given" {
		t.Errorf("partition method %q", rep.Partition.Method)
	}
	code, _, errOut = strata(t, "--quiet", "train", "--mode", "fullgraph", "--model", "sage", "--dataset", g, "--devices", "cpu:2",
		"--epochs", "1", "--partition-file", file)
	if code != 2 || !strings.Contains(errOut, "3 parts for 2 devices") {
		t.Errorf("3-part file on 2 devices: exit %d, %q", code, errOut)
	}
}

// TestTrainFullGraphBadPartitionFile: a partition file of another dataset,
// a truncated one and one of garbage fail with exit 1 and a message naming
// the file, never a panic.
func TestTrainFullGraphBadPartitionFile(t *testing.T) {
	dir := t.TempDir()
	g, other := filepath.Join(dir, "g"), filepath.Join(dir, "other")
	for _, gen := range [][]string{{g, "--preset", "tiny"}, {other, "--preset", "tiny", "--nodes", "700"}} {
		if code, _, errOut := strata(t, append([]string{"--quiet", "gen"}, gen...)...); code != 0 {
			t.Fatalf("gen %v: exit %d: %s", gen, code, errOut)
		}
	}
	p := filepath.Join(dir, "p")
	if code, _, errOut := strata(t, "--quiet", "partition", other, p, "-k", "2"); code != 0 {
		t.Fatalf("partition: exit %d: %s", code, errOut)
	}
	file := filepath.Join(p, "partition.bin")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	truncated := writeFile(t, filepath.Join(dir, "truncated.bin"), string(data[:len(data)/2]))
	garbage := writeFile(t, filepath.Join(dir, "garbage.bin"), strings.Repeat("x", 100))
	for _, tc := range []struct{ file, want string }{
		{file, "has 700 nodes"},
		{truncated, "truncated.bin"},
		{garbage, "garbage.bin: at byte 0"},
	} {
		code, _, errOut := strata(t, "--quiet", "train", "--mode", "fullgraph", "--model", "gcn", "--dataset", g,
			"--devices", "cpu:2", "--epochs", "1", "--partition-file", tc.file)
		if code != 1 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q", tc.file, code, errOut, tc.want)
		}
	}
}

// TestModeFullIsFullGraphOnOneDevice: --mode full (gcn's and gat's
// default) is the whole-graph engine on the one device of --device: its
// report equals --mode fullgraph --devices cpu:1's epoch for epoch, the
// losses bit for bit, for GCN, GraphSAGE with SGD and momentum, and GAT,
// with dropout; the flags --mode full always took (--fanouts, an SGD
// optimizer, --eval-every) work, and so do checkpoints: a run stopped
// after 3 epochs and resumed for 5 is the 5-epoch run.
func TestModeFullIsFullGraphOnOneDevice(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	report := func(name string, args ...string) *fullgraph.Report {
		t.Helper()
		path := filepath.Join(dir, name+".json")
		code, out, errOut := strata(t, append([]string{"--quiet", "train", "--epochs", "5", "--report", path}, args...)...)
		if code != 0 || !strings.Contains(out, "test accuracy") {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		rep, err := fullgraph.ReadReport(path)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	same := func(name string, got, want *fullgraph.Report) {
		t.Helper()
		if len(got.Epochs) != len(want.Epochs) || got.TestAccuracy != want.TestAccuracy || got.SelectedEpoch != want.SelectedEpoch {
			t.Fatalf("%s: %d epochs, test %v at %d; want %d, %v at %d", name, len(got.Epochs), got.TestAccuracy, got.SelectedEpoch,
				len(want.Epochs), want.TestAccuracy, want.SelectedEpoch)
		}
		for i, w := range want.Epochs {
			g := got.Epochs[i]
			if math.Float64bits(g.Loss) != math.Float64bits(w.Loss) || g.EvalSkipped != w.EvalSkipped || g.TrainAccuracy != w.TrainAccuracy ||
				g.ValAccuracy != w.ValAccuracy || g.TestAccuracy != w.TestAccuracy || g.ValLoss != w.ValLoss {
				t.Fatalf("%s epoch %d:\n got %+v\nwant %+v", name, i+1, g, w)
			}
		}
	}
	for _, args := range [][]string{
		{"--model", "gcn", "--fanouts", "4,3"},
		{"--model", "sage", "--hidden", "16", "--optimizer", "sgd", "--lr", "0.2", "--momentum", "0.9", "--eval-every", "2"},
		{"--model", "gat", "--hidden", "4", "--heads", "2", "--dropout", "0.3"},
	} {
		name := args[1]
		full := report(name+"-full", append([]string{"--mode", "full", "--device", "cpu"}, args...)...)
		if name != "sage" {
			def := report(name+"-default", args...) // full is the model's default mode
			same(name+" default mode", def, full)
		}
		if full.Mode != "full" || full.Engine != "distributed" || len(full.Devices) != 1 || full.Config.Order != fullgraph.OrderNone {
			t.Errorf("%s: mode %q, engine %q, devices %v, order %q", name, full.Mode, full.Engine, full.Devices, full.Config.Order)
		}
		fanouts := args[2] == "--fanouts"
		if fanouts {
			args = args[:2] // --mode fullgraph refuses the sampling flags
		}
		same(name+" --mode full vs fullgraph cpu:1", full, report(name+"-fullgraph", append([]string{"--mode", "fullgraph", "--devices", "cpu:1"}, args...)...))
	}

	want := report("uninterrupted", "--model", "gcn")
	ck := filepath.Join(dir, "ck")
	code, _, errOut := strata(t, "--quiet", "train", "--model", "gcn", "--epochs", "3", "--checkpoint", ck, "--checkpoint-every", "2")
	if code != 0 {
		t.Fatalf("checkpointed run: exit %d, %s", code, errOut)
	}
	got := report("resumed", "--model", "gcn", "--checkpoint", ck, "--resume")
	if got.ResumedFrom == nil || got.ResumedFrom.Epoch != 3 {
		t.Fatalf("resumed from %+v, want epoch 3", got.ResumedFrom)
	}
	same("resumed", got, want)
}
