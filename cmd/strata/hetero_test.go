package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--devices", "cpu:2"}, "--devices does not apply"},
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
