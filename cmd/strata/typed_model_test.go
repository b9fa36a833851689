package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/train"
)

// TestTypedSaveEvaluate: a typed model trained with --save (hsage on one
// device, rgcn with reverse relations on two) is evaluated to the
// report's accuracies exactly; predict's argmax over --nodes (the test
// nodes of the target type) gives the test accuracy; embed's shape is
// the hidden width.
func TestTypedSaveEvaluate(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "h")
	if code, _, errb := strata(t, "--quiet", "gen", ds, "--preset", "hetero", "--nodes", "400"); code != 0 {
		t.Fatal(errb)
	}
	h, err := dataset.OpenHetero(ds, dataset.OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"hsage", []string{"--model", "hsage", "--epochs", "3", "--hidden", "16"}},
		{"rgcn devices", []string{"--model", "rgcn", "--epochs", "2", "--hidden", "8", "--add-reverse", "--devices", "cpu:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, rep := filepath.Join(dir, tc.name, "model"), filepath.Join(dir, tc.name, "report.json")
			code, out, errb := strata(t, append([]string{"--quiet", "train", "--dataset", ds, "--save", m, "--report", rep}, tc.args...)...)
			if code != 0 {
				t.Fatalf("train: exit %d: %s", code, errb)
			}
			if !strings.Contains(out, "model               "+m) {
				t.Errorf("train does not say where the model went:\n%s", out)
			}
			var r train.Report
			if b, err := os.ReadFile(rep); err != nil || json.Unmarshal(b, &r) != nil || len(r.Epochs) == 0 {
				t.Fatalf("report %s: %v", rep, err)
			}
			sel := r.Epochs[r.SelectedEpoch-1]
			saved, err := model.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			if saved.Meta.Typed == nil || saved.Meta.Selection.Epoch != r.SelectedEpoch || saved.Meta.Dataset.Fingerprint != h.Fingerprint() {
				t.Fatalf("model.json: typed %v, selection %+v, dataset %+v; report selected epoch %d", saved.Meta.Typed != nil, saved.Meta.Selection, saved.Meta.Dataset, r.SelectedEpoch)
			}

			evPath := filepath.Join(dir, tc.name, "eval.json")
			code, out, errb = strata(t, "--quiet", "evaluate", "--model", m, "--dataset", ds, "--report", evPath)
			if code != 0 {
				t.Fatalf("evaluate: exit %d: %s", code, errb)
			}
			ev := readEvaluation(t, evPath)
			if ev.TrainAccuracy != sel.TrainAccuracy || ev.ValAccuracy != sel.ValAccuracy || ev.TestAccuracy != sel.TestAccuracy {
				t.Fatalf("evaluate gives train %v val %v test %v; the report's epoch %d has train %v val %v test %v",
					ev.TrainAccuracy, ev.ValAccuracy, ev.TestAccuracy, r.SelectedEpoch, sel.TrainAccuracy, sel.ValAccuracy, sel.TestAccuracy)
			}
			if ev.ReportMatches == nil || !*ev.ReportMatches || !strings.Contains(out, "equal to epoch") {
				t.Errorf("evaluate does not confirm the report:\n%s", out)
			}

			// predict the test nodes (IDs of the target type) and score them.
			nodes := filepath.Join(dir, tc.name, "test.txt")
			var ids []string
			for _, v := range h.Test {
				ids = append(ids, strconv.Itoa(int(v)))
			}
			if err := os.WriteFile(nodes, []byte(strings.Join(ids, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			logits := filepath.Join(dir, tc.name, "logits.npy")
			if code, _, errb := strata(t, "--quiet", "predict", "--model", m, "--dataset", ds, "--nodes", nodes, "--out", logits); code != 0 {
				t.Fatalf("predict: exit %d: %s", code, errb)
			}
			rows, cols, data := readMatrix(t, logits)
			if rows != len(h.Test) || cols != h.NumClasses {
				t.Fatalf("predict wrote %d x %d, want %d x %d", rows, cols, len(h.Test), h.NumClasses)
			}
			correct := 0
			for i, v := range h.Test {
				best := 0
				for c := 1; c < cols; c++ {
					if data[i*cols+c] > data[i*cols+best] {
						best = c
					}
				}
				if int32(best) == h.Labels[v] {
					correct++
				}
			}
			if acc := float64(correct) / float64(len(h.Test)); acc != sel.TestAccuracy {
				t.Errorf("predict's argmax gives test accuracy %v, the report %v", acc, sel.TestAccuracy)
			}
			emb := filepath.Join(dir, tc.name, "emb.npy")
			if code, _, errb := strata(t, "--quiet", "embed", "--model", m, "--dataset", ds, "--out", emb); code != 0 {
				t.Fatalf("embed: exit %d: %s", code, errb)
			}
			if rows, cols, _ := readMatrix(t, emb); rows != int(h.NodeTypes[h.Target].NumNodes) || cols != saved.Meta.Hidden {
				t.Errorf("embed wrote %d x %d, want %d x %d", rows, cols, h.NodeTypes[h.Target].NumNodes, saved.Meta.Hidden)
			}
		})
	}
}

// TestTypedModelErrors: a typed model with data of another schema, and
// flags typed inference does not take, exit 2 with one line naming what
// differs.
func TestTypedModelErrors(t *testing.T) {
	dir := t.TempDir()
	ds, wide, m := filepath.Join(dir, "h"), filepath.Join(dir, "wide"), filepath.Join(dir, "m")
	for _, args := range [][]string{
		{"gen", ds, "--preset", "hetero", "--nodes", "200"},
		{"gen", wide, "--preset", "hetero", "--nodes", "200", "--features", "12"},
		{"train", "--model", "hsage", "--dataset", ds, "--epochs", "1", "--hidden", "8", "--save", m},
	} {
		if code, _, errb := strata(t, append([]string{"--quiet"}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, errb)
		}
	}
	mag := filepath.Join("..", "..", "dataset", "importer", "testdata", "ogbn-mag-tiny")
	out := filepath.Join(dir, "x.npy")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evaluate", "--model", m, "--dataset", wide}, `does not fit the model in ` + m + `: node type "paper" has 6 features, the model reads 16`},
		{[]string{"evaluate", "--model", m, "--dataset", mag}, "it has 4 node types [author field_of_study institution paper], the model reads 3 [paper author field]"},
		{[]string{"predict", "--model", m, "--out", out}, "--dataset cora is a built-in homogeneous dataset"},
		{[]string{"predict", "--model", m, "--dataset", ds, "--out", out, "--devices", "cpu:2"}, "--devices: a typed model (hsage) infers on one device"},
		{[]string{"predict", "--model", m, "--dataset", ds, "--out", out, "--infer-budget", "64MiB"}, "--infer-budget: a typed model"},
		{[]string{"embed", "--model", m, "--dataset", ds, "--out", out, "--layer", "3"}, "--layer 3: the model has layers 1 to 2"},
		{[]string{"train", "--model", "hsage", "--dataset", ds, "--task", "link", "--link-relation", "writes", "--save", m}, "--save: typed link prediction"},
	} {
		code, _, errb := strata(t, append(tc.args, "--quiet")...)
		if code != 2 || !strings.Contains(errb, tc.want) || strings.Count(strings.TrimSpace(errb), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, errb, tc.want)
		}
	}
	// Another typed dataset of the same schema is inductive use: a warning.
	other := filepath.Join(dir, "other")
	if code, _, errb := strata(t, "--quiet", "gen", other, "--preset", "hetero", "--nodes", "300", "--seed", "9"); code != 0 {
		t.Fatal(errb)
	}
	code, _, errb := strata(t, "predict", "--model", m, "--dataset", other, "--out", out)
	if code != 0 || !strings.Contains(errb, "inductive use") {
		t.Errorf("predict on another dataset of the schema: exit %d, stderr %q; want 0 and an inductive-use warning", code, errb)
	}
}
