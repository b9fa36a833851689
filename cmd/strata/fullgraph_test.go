package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/fullgraph"
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
		{[]string{"--staleness", "--staleness-epochs", "0"}, "epoch_bound"},
		{[]string{"--checkpoint", "x"}, "checkpoints"},
	} {
		args := append([]string{"--quiet", "train", "--mode", "fullgraph", "--model", "gcn"}, tc.args...)
		code, _, errOut := strata(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q (want 2 and %q)", tc.args, code, errOut, tc.want)
		}
	}
}
