package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/internal/sysmem"
	"github.com/strata-gnn/strata/link"
)

// TestTrainLink runs 'strata train --task link' on the built-in Cora for
// a few epochs in both modes and checks the printed metrics and the
// report.
func TestTrainLink(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--model", "gcn", "--epochs", "5", "--hidden", "16"},
		{"--model", "sage", "--epochs", "1", "--hidden", "16", "--batch-size", "2048", "--fanouts", "5,5", "--decoder", "mlp", "--neg-sampling", "degree", "--neg-exclude", "--neg-ratio", "2", "--hits-k", "20", "--split-edges", "0.8,0.1,0.1"},
	} {
		report := filepath.Join(dir, args[1]+".json")
		code, out, errOut := strata(t, append([]string{"train", "--quiet", "--task", "link", "--report", report}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		for _, want := range []string{"links", "validation", "test", "auc", "mrr", "hits@"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%v: stdout lacks %q:\n%s", args, want, out)
			}
		}
		data, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		var rep link.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Task != "link" || rep.Model != args[1] || !(rep.Test.AUC > 0 && rep.Test.AUC <= 1) || len(rep.Epochs) == 0 {
			t.Fatalf("%v: report task %q model %q test %+v, %d epochs", args, rep.Task, rep.Model, rep.Test, len(rep.Epochs))
		}
		// GCN learns Cora's links within 5 epochs (the link package checks
		// the accuracy of every setting).
		if args[1] == "gcn" && rep.Test.AUC < 0.7 {
			t.Fatalf("gcn, 5 epochs: test AUC %.4f < 0.7", rep.Test.AUC)
		}
		if args[1] == "sage" {
			c := rep.Config
			if rep.Mode != "sampled" || c.Decoder != "mlp" || c.NegSample != "degree" || !c.NegExclude || c.NegRatio != 2 || rep.HitsK != 20 || c.Split != (link.Fractions{Train: 0.8, Val: 0.1, Test: 0.1}) {
				t.Fatalf("flags not in the report's config: %+v", c)
			}
			if rep.Split.Val != rep.Split.Test || rep.Split.Train < 7*rep.Split.Test {
				t.Fatalf("split 0.8,0.1,0.1 gave %+v", rep.Split)
			}
		}
	}
}

// TestTrainLinkUsageErrors: link flags in node mode, and settings the
// link task does not take, are usage errors naming the flag.
func TestTrainLinkUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--neg-ratio", "2"}, "--neg-ratio applies to --task link"},
		{[]string{"--decoder", "mlp"}, "--decoder applies to --task link"},
		{[]string{"--task", "link", "--devices", "cpu:2", "--mode", "full"}, "--devices"},
		{[]string{"--task", "link", "--mode", "fullgraph", "--batch-size", "64"}, "--batch-size"},
		{[]string{"--task", "link", "--mode", "fullgraph", "--cache", "1MiB"}, "--cache"},
		{[]string{"--task", "link", "--devices", "cpu:2", "--staleness"}, "--staleness"},
		{[]string{"--task", "link", "--checkpoint", t.TempDir()}, "--checkpoint"},
		{[]string{"--task", "link", "--resume"}, "--resume"},
		{[]string{"--task", "link", "--plot", "x.png"}, "--plot"},
		{[]string{"--task", "link", "--mode", "fullgraph", "--save", t.TempDir()}, "--save: --task link --mode fullgraph does not export its model yet"},
		{[]string{"--task", "link", "--staleness"}, "--staleness"},
		{[]string{"--task", "link", "--split-edges", "0.9,0.1,0.1"}, "--split-edges"},
		{[]string{"--task", "link", "--split-edges", "0.9,0.1"}, "--split-edges"},
		{[]string{"--task", "link", "--decoder", "bilinear"}, "--decoder"},
		{[]string{"--task", "link", "--neg-sampling", "popular"}, "--neg-sampling"},
		{[]string{"--task", "link", "--neg-ratio", "0"}, "--neg-ratio"},
		{[]string{"--task", "link", "--hits-k", "0"}, "--hits-k"},
		{[]string{"--task", "link", "--fanouts", "5", "--mode", "sampled"}, "fanouts"},
		{[]string{"--task", "triangle"}, "--task"},
		{[]string{"--task", "link", "--model", "rgcn"}, "--dataset cora is a built-in homogeneous dataset"},
		{[]string{"--task", "link", "--comm", "nccl"}, "--comm"},
		{[]string{"--task", "link", "--rel-fanouts", "cites=5,5"}, "--rel-fanouts"},
	} {
		code, _, errOut := strata(t, append([]string{"train", "--quiet"}, tc.args...)...)
		oneLineError(t, strings.Join(tc.args, " "), code, errOut, tc.want)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", tc.args, code)
		}
	}
}

// TestTrainLinkMemory: a link run whose estimate exceeds the memory left
// is refused before anything is sized, naming the flag and the estimate.
func TestTrainLinkMemory(t *testing.T) {
	saved := memoryBudget
	defer func() { memoryBudget = saved }()
	memoryBudget = func() (sysmem.Budget, bool) { return sysmem.Budget{Bytes: 100 << 20, Source: "test"}, true }
	code, _, errOut := strata(t, "train", "--quiet", "--task", "link", "--model", "gcn", "--hidden", "4096", "--epochs", "1")
	if code != 2 || !strings.Contains(errOut, "--hidden: this run needs about") || !strings.Contains(errOut, "more than the 100 MiB available (test)") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
	// The defaults fit.
	code, _, errOut = strata(t, "train", "--quiet", "--task", "link", "--model", "gcn", "--epochs", "1")
	if code != 0 {
		t.Fatalf("default gcn link run refused under 100 MiB: exit %d, %q", code, errOut)
	}
}

// TestTrainLinkStoredSplit: a dataset directory with an edge split
// (strata split --edge-split) trains on that split, and --split-edges
// given too is a usage error naming both.
func TestTrainLinkStoredSplit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cora")
	ds := loadCora(t)
	if err := dataset.Write(dir, ds, dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	es, err := split.Edges(ds, split.Fractions{0.8, 0.1, 0.1}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := es.WriteDir(filepath.Join(dir, split.EdgeSplitDir)); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := strata(t, "train", "--quiet", "--task", "link", "--dataset", dir, "--split-edges", "0.85,0.05,0.1")
	oneLineError(t, "--split-edges with a stored split", code, errOut, "--split-edges")
	if code != 2 || !strings.Contains(errOut, split.EdgeSplitDir) {
		t.Fatalf("exit %d, want 2 naming the stored split: %s", code, errOut)
	}
	report := filepath.Join(t.TempDir(), "r.json")
	code, out, errOut := strata(t, "train", "--quiet", "--task", "link", "--dataset", dir, "--epochs", "2", "--hidden", "16", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep link.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	st := rep.Split
	if st.Source != link.SourceStored || st.Train != len(es.Src[0]) || st.Val != len(es.Src[1]) || st.Test != len(es.Src[2]) || !strings.Contains(out, "edge_split") {
		t.Fatalf("report split %+v, stored %d/%d/%d\n%s", st, len(es.Src[0]), len(es.Src[1]), len(es.Src[2]), out)
	}
}

// TestTrainLinkDevices: --task link on several CPU devices, in the DSP
// engine (--devices) and with the full-graph trainer (--mode fullgraph),
// prints the metrics and reports the engine and the devices.
func TestTrainLinkDevices(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		engine string
		args   []string
	}{
		{"dsp", []string{"--devices", "cpu:2", "--epochs", "2", "--hidden", "16", "--fanouts", "5,5"}},
		{"fullgraph", []string{"--mode", "fullgraph", "--devices", "cpu:2", "--model", "gcn", "--epochs", "4", "--hidden", "16", "--staleness"}},
	} {
		report := filepath.Join(dir, tc.engine+".json")
		code, out, errOut := strata(t, append([]string{"train", "--quiet", "--task", "link", "--report", report}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", tc.args, code, out, errOut)
		}
		data, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		var rep link.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Engine != tc.engine || rep.Devices != 2 || !(rep.Test.AUC > 0.6 && rep.Test.AUC <= 1) || !strings.Contains(out, "test ") || !strings.Contains(out, tc.engine) {
			t.Fatalf("%v: engine %q devices %d test %+v\n%s", tc.args, rep.Engine, rep.Devices, rep.Test, out)
		}
	}
}
