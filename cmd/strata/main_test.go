package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/train"
)

// TestMain lets tests re-run this binary as the strata command:
// STRATA_TEST_MAIN=1 makes the process behave as main().
func TestMain(m *testing.M) {
	if os.Getenv("STRATA_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// strata runs the command in-process and returns its exit code and output.
func strata(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpAndVersion(t *testing.T) {
	code, out, _ := strata(t, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, cmd := range []string{"train", "import", "gen", "info", "--config", "--quiet"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("help lacks %q:\n%s", cmd, out)
		}
	}
	code, out, _ = strata(t, "--version")
	if code != 0 || strings.TrimSpace(out) != "strata "+train.Version {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	code, out, _ = strata(t, "train", "--help")
	if code != 0 || !strings.Contains(out, "--checkpoint-every") || !strings.Contains(out, "cora") {
		t.Fatalf("train --help: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--model", "mlp"}, "--model"},
		{[]string{"train", "--epochs", "0", "--quiet"}, "epochs"},
		{[]string{"train", "--fanouts", "5", "--quiet"}, "1 fanouts for 2 layers"},
		{[]string{"train", "--resume", "--quiet"}, "--resume needs --checkpoint"},
		{[]string{"train", "--heads", "4", "--quiet"}, "gat only"},
		{[]string{"train", "--dataset", "no-such-thing", "--quiet"}, "neither a built-in dataset"},
		{[]string{"train", "--device", "tpu", "--quiet"}, "tpu"},
		{[]string{"bogus"}, "unexpected argument"},
	} {
		code, _, errOut := strata(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestExplicitCUDAWithoutCUDAFails(t *testing.T) {
	if b, err := openDevice("cuda"); err == nil {
		t.Skipf("a CUDA device is usable here (%s)", b.Name())
	}
	code, _, errOut := strata(t, "train", "--device", "cuda", "--quiet", "--epochs", "1")
	if code == 0 || !strings.Contains(errOut, "cuda") {
		t.Fatalf("exit %d, stderr %q: want an error about cuda", code, errOut)
	}
	// auto falls back to the CPU.
	if b, err := openDevice("auto"); err != nil || b.Name() != "cpu" {
		t.Fatalf("auto device: %v, %v", b, err)
	}
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFileAndFlagPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "run.yaml"), `
# GCN on the built-in Cora
model: gcn
epochs: 3
hidden: 8
weight_decay: 0.001
fanouts: [4, 3]
seed: 7
quiet: true
`)
	report := filepath.Join(dir, "r.json")
	code, out, errOut := strata(t, "--config", cfg, "train", "--epochs", "2", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("quiet: true in the file should silence stderr, got %q", errOut)
	}
	if !strings.Contains(out, "test accuracy") {
		t.Errorf("stdout lacks the result:\n%s", out)
	}
	// GCN trains the whole graph (fullgraph's engine, which reads no
	// fanouts: the file's are checked and accepted all the same).
	rep, err := fullgraph.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Config
	if c.Model != "gcn" || c.Epochs != 2 || c.Hidden != 8 || c.WeightDecay != 0.001 || c.Seed != 7 ||
		rep.Mode != "full" || len(rep.Epochs) != 2 {
		t.Fatalf("config from file + flags: %+v (%d epochs)", c, len(rep.Epochs))
	}

	for _, tc := range []struct{ yaml, want string }{
		{"model: gcn\nbatch-sise: 3\n", `line 2: unknown key "batch-sise": strata train has no flag --batch-sise (did you mean --batch-size?)`},
		{"bogus-option: 3\n", `line 1: unknown key "bogus-option": strata train has no flag --bogus-option ('strata train --help' lists them)`},
		{"epochs: 2\nepochs: 3\n", `key "epochs" given twice`},
		{"fanouts: {a: 1}\n", `key "fanouts": want a value or a list`},
		{"- 1\n- 2\n", "want a mapping"},
		{"epochs: [1, [2]]\n", "list items must be plain values"},
		{"epochs: many\n", "epochs"},
	} {
		bad := writeFile(t, filepath.Join(dir, "bad.yaml"), tc.yaml)
		code, _, errOut := strata(t, "--config", bad, "train", "--quiet")
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("config %q: exit %d, stderr %q; want exit 2 and %q", tc.yaml, code, errOut, tc.want)
		}
	}
	// A key of another subcommand is unknown to this one.
	other := writeFile(t, filepath.Join(dir, "gen.yaml"), "preset: tiny\n")
	if code, _, errOut := strata(t, "--config", other, "train", "--quiet"); code != 2 || !strings.Contains(errOut, `unknown key "preset"`) {
		t.Errorf("gen key for train: exit %d, %q", code, errOut)
	}
	if code, _, errOut := strata(t, "--config", filepath.Join(dir, "missing.yaml"), "train"); code == 0 || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing config: exit %d, %q", code, errOut)
	}
}

func TestInfo(t *testing.T) {
	code, out, errOut := strata(t, "info", "cora")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"back ends:", "cpu    ok", "auto device: cpu", "built-in datasets: cora", "nodes       2708", "classes     7", "train 140 / val 500 / test 1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
}

func TestGenImportInfoTrain(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "tiny")
	code, out, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny", "--nodes", "1500", "--seed", "3")
	if code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "nodes       1500") {
		t.Fatalf("gen output:\n%s", out)
	}
	if code, _, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny"); code == 0 || !strings.Contains(errOut, "exist") {
		t.Fatalf("gen over an existing dataset: exit %d, %q", code, errOut)
	}
	code, out, _ = strata(t, "info", g)
	if code != 0 || !strings.Contains(out, "nodes       1500") || !strings.Contains(out, "format v1") {
		t.Fatalf("info on generated data: exit %d\n%s", code, out)
	}
	report := filepath.Join(dir, "r.json")
	plot := filepath.Join(dir, "curves.png")
	code, _, errOut = strata(t, "--quiet", "train", "--dataset", g, "--epochs", "8", "--report", report, "--plot", plot)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
	rep, err := train.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowNormalized || rep.TestAccuracy < 0.7 || rep.Graph.Nodes != 1500 {
		t.Fatalf("trained on generated data: row-normalized %v, test %v, nodes %d", rep.RowNormalized, rep.TestAccuracy, rep.Graph.Nodes)
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() < 1000 {
		t.Fatalf("plot: %v", err)
	}

	// Import the shared-layout Cora from the datasets folder when present.
	src := filepath.Join(sharedDir(t), "cora")
	dst := filepath.Join(dir, "cora")
	code, out, errOut = strata(t, "--quiet", "import", src, dst)
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "shared layout") || !strings.Contains(out, "nodes       2708") {
		t.Fatalf("import output:\n%s", out)
	}
}

// skipUnderRace skips an end-to-end test of one in-process run in a
// -race build (see race_on_test.go).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("end-to-end results of one run: the non-race pass runs it; its engine is race-tested in its package")
	}
}
