package main

import (
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
	if rep.Mode != "fullgraph" || len(rep.Devices) != 3 || len(rep.Epochs) != 4 || rep.Config.Staleness.EpochBound != 2 ||
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
		{[]string{"--optimizer", "sgd"}, "adam"},
		{[]string{"--staleness-eps", "0.1"}, "need --staleness"},
		{[]string{"--staleness", "--staleness-epochs", "0"}, "--staleness-epochs 0"},
		{[]string{"--checkpoint", "x"}, "checkpoints"},
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
