package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/train"
)

// TestHeteroCommands runs the typed path as a user would: generate the
// hetero preset, look at it, train hsage and rgcn on it with a report,
// import the ogbn-mag-shaped fixture with reverse relations.
func TestHeteroCommands(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "h")
	code, out, errb := strata(t, "--quiet", "gen", ds, "--preset", "hetero", "--nodes", "1000", "--seed", "3")
	if code != 0 || !strings.Contains(out, "format v2, typed") || !strings.Contains(out, "author___writes___paper") {
		t.Fatalf("gen: exit %d\n%s%s", code, out, errb)
	}
	code, out, errb = strata(t, "info", ds)
	if code != 0 || !strings.Contains(out, "paper                1000 nodes, 16 features  (target)") || !strings.Contains(out, "verified    checksums") {
		t.Fatalf("info: exit %d\n%s%s", code, out, errb)
	}
	rep := filepath.Join(dir, "r.json")
	code, out, errb = strata(t, "--quiet", "train", "--dataset", ds, "--model", "hsage", "--epochs", "3", "--hidden", "16",
		"--rel-fanouts", "rev_has_topic=5,5,writes=3,0", "--report", rep)
	if code != 0 || !strings.Contains(out, "test accuracy") {
		t.Fatalf("train hsage: exit %d\n%s%s", code, out, errb)
	}
	b, err := os.ReadFile(rep)
	if err != nil || !strings.Contains(string(b), `"field___rev_has_topic___paper"`) || !strings.Contains(string(b), `"model": "hsage"`) {
		t.Fatalf("report: %v\n%s", err, b)
	}
	var r struct {
		Hetero train.HeteroSummary `json:"hetero"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	fan := map[string]string{}
	for _, e := range r.Hetero.EdgeTypes {
		fan[e.Name] = fmt.Sprint(e.Fanouts)
	}
	if fan["field___rev_has_topic___paper"] != "[5 5]" || fan["author___writes___paper"] != "[3 0]" || fan["paper___has_topic___field"] != "[10 10]" {
		t.Fatalf("fanouts in the report: %v", fan)
	}
	// The same from a config file, whose lists kong splits at commas too.
	cfgFile := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(cfgFile, []byte("model: rgcn\nepochs: 1\nrel-fanouts: [rev_has_topic=5,5, writes=3,0]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errb := strata(t, "--quiet", "--config", cfgFile, "train", "--dataset", ds); code != 0 {
		t.Fatalf("train from a config file: exit %d\n%s", code, errb)
	}
	code, out, errb = strata(t, "--quiet", "train", "--dataset", ds, "--model", "rgcn", "--epochs", "1", "--eval", "sampled")
	if code != 0 || !strings.Contains(out, "validation accuracy") {
		t.Fatalf("train rgcn: exit %d\n%s%s", code, out, errb)
	}
	mag := filepath.Join(dir, "mag")
	code, out, errb = strata(t, "--quiet", "import", filepath.Join("..", "..", "dataset", "importer", "testdata", "ogbn-mag-tiny"), mag, "--add-reverse")
	if code != 0 || !strings.Contains(out, "ogb-hetero layout") || !strings.Contains(out, "paper___rev_writes___author") {
		t.Fatalf("import: exit %d\n%s%s", code, out, errb)
	}
}

func TestHeteroUsageErrors(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "h")
	if code, _, errb := strata(t, "--quiet", "gen", ds, "--preset", "hetero", "--nodes", "200"); code != 0 {
		t.Fatal(errb)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--model", "rgcn"}, "--dataset cora is a built-in homogeneous dataset"},
		{[]string{"train", "--model", "sage", "--dataset", ds}, "is a typed dataset (format version 2): train it with --model rgcn or hsage"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--rel-fanouts", "venue=2,2"}, "--rel-fanouts: venue names no relation"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--rel-fanouts", "writes"}, "--rel-fanouts \"writes\": want REL=F1,F2"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--rel-fanouts", "writes=2,2,writes=1,1"}, "--rel-fanouts: writes given twice"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--rel-fanouts=writes=1,-2"}, "each in 0..65536 or -1"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--rel-fanouts", "writes=1,70000"}, "each in 0..65536 or -1"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--checkpoint", dir}, "not supported for --model hsage"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:0"}, "--devices cpu:0: want cpu:N"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--task", "link", "--link-relation", "writes"}, "--devices: typed link prediction"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--comm", "nccl"}, "--comm nccl needs CUDA --devices"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--comm", "host"}, "--comm host applies to --mode fullgraph"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--cache", "1MiB"}, "--cache does not apply to --model hsage"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--partition", "range"}, "--partition does not apply"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--gpushm-slots", "4"}, "--gpushm-slots applies to --comm gpushm"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--comm-timeout", "0s"}, "--comm-timeout \"0s\""},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2", "--batch-size", "0"}, "--batch-size"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--comm", "shm"}, "--comm needs several devices"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--comm-timeout", "5s"}, "--comm-timeout needs several devices"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--weighted"}, "--weighted: relation author___writes___paper"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--fanouts", "5"}, "--fanouts: 1 fanouts for 2 layers"},
		{[]string{"train", "--model", "gcn", "--add-reverse"}, "--add-reverse applies to --model rgcn or hsage"},
		{[]string{"gen", filepath.Join(dir, "x"), "--preset", "hetero", "--exponent", "2"}, "--exponent does not apply to --preset hetero"},
		{[]string{"gen", filepath.Join(dir, "x"), "--preset", "hetero", "--classes", "3"}, "want an even number"},
		{[]string{"import", filepath.Join("..", "..", "dataset", "importer", "testdata", "ogbn-mag-tiny"), filepath.Join(dir, "y"), "--symmetrize"}, "use --add-reverse"},
	} {
		code, _, errb := strata(t, append(tc.args, "--quiet")...)
		if code != 2 || !strings.Contains(errb, tc.want) || strings.Count(strings.TrimSpace(errb), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, errb, tc.want)
		}
	}
	if !train.IsHetero("rgcn") || train.IsHetero("sage") {
		t.Fatal("IsHetero")
	}
}

// TestHeteroDevicesCommand: 'strata train --model hsage --devices cpu:3'
// on the hetero preset prints the accuracies, the epoch time and the
// devices, and writes a report with the multi_device section; the same
// run on cpu:1 gives --device cpu's losses.
func TestHeteroDevicesCommand(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "h")
	if code, _, errb := strata(t, "--quiet", "gen", ds, "--preset", "hetero", "--nodes", "1000", "--seed", "2"); code != 0 {
		t.Fatal(errb)
	}
	args := []string{"--quiet", "train", "--dataset", ds, "--model", "hsage", "--epochs", "2", "--hidden", "16"}
	type report struct {
		Epochs []train.EpochRecord `json:"epochs"`
		Multi  *train.MultiDevice  `json:"multi_device"`
	}
	read := func(path string) report {
		var r report
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rep3 := filepath.Join(dir, "r3.json")
	code, out, errb := strata(t, append(args, "--devices", "cpu:3", "--report", rep3)...)
	if code != 0 || !strings.Contains(out, "test accuracy") || !strings.Contains(out, "epoch time") || !strings.Contains(out, "on cpu x3 (comm inproc)") {
		t.Fatalf("train --devices cpu:3: exit %d\n%s%s", code, out, errb)
	}
	if r := read(rep3); r.Multi == nil || r.Multi.Devices != 3 || r.Multi.Comm != "inproc" || len(r.Epochs) != 2 || r.Epochs[1].EvalSkipped {
		t.Fatalf("report of cpu:3: %+v", r)
	}
	rep1, repOne := filepath.Join(dir, "r1.json"), filepath.Join(dir, "one.json")
	if code, _, errb := strata(t, append(args, "--devices", "cpu:1", "--report", rep1)...); code != 0 {
		t.Fatal(errb)
	}
	if code, _, errb := strata(t, append(args, "--device", "cpu", "--report", repOne)...); code != 0 {
		t.Fatal(errb)
	}
	a, b := read(rep1), read(repOne)
	if b.Multi != nil || a.Multi == nil || a.Multi.Comm != "none" {
		t.Fatalf("multi_device sections: cpu:1 %+v, --device cpu %+v", a.Multi, b.Multi)
	}
	for e := range b.Epochs {
		if !slices.Equal(a.Epochs[e].BatchLosses, b.Epochs[e].BatchLosses) {
			t.Fatalf("epoch %d: losses on cpu:1 %v, on --device cpu %v", e+1, a.Epochs[e].BatchLosses, b.Epochs[e].BatchLosses)
		}
	}
}
