package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/model"
)

// TestTypedLinkModel trains typed link models (hsage with the mlp
// decoder and --select last, rgcn with dot) for two epochs with --save on
// a generated typed dataset; evaluate gives the report's validation and
// test metrics exactly, embed writes the source type's embeddings, and
// predict refuses with one line.
func TestTypedLinkModel(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	ds := filepath.Join(dir, "h")
	if code, out, errb := strata(t, "--quiet", "gen", ds, "--preset", "hetero", "--nodes", "800", "--seed", "3"); code != 0 {
		t.Fatalf("gen: exit %d\n%s%s", code, out, errb)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"hsage mlp last", []string{"--model", "hsage", "--decoder", "mlp", "--select", "last"}},
		{"rgcn dot best", []string{"--model", "rgcn", "--hits-k", "20"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			m, repPath := filepath.Join(d, "model"), filepath.Join(d, "report.json")
			args := append([]string{"--quiet", "train", "--task", "link", "--dataset", ds, "--link-relation", "writes", "--epochs", "2",
				"--hidden", "16", "--seed", "1", "--save", m, "--report", repPath}, tc.args...)
			code, out, errOut := strata(t, args...)
			if code != 0 {
				t.Fatalf("train: exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "model               "+m) {
				t.Errorf("train does not say where the model went:\n%s", out)
			}
			var rep link.HeteroReport
			if b, err := os.ReadFile(repPath); err != nil || json.Unmarshal(b, &rep) != nil || rep.Report == nil || len(rep.Epochs) != 2 {
				t.Fatalf("report %s: %v", repPath, err)
			}
			if strings.Contains(tc.name, "last") && rep.SelectedEpoch != 2 {
				t.Fatalf("--select last selected epoch %d", rep.SelectedEpoch)
			}
			saved, err := model.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			meta := saved.Meta
			if !meta.IsLink() || meta.Typed == nil || meta.Version != model.VersionLink || meta.Link.Relation != "author___writes___paper" ||
				meta.Typed.Target != "author" || meta.Selection.Epoch != rep.SelectedEpoch || *meta.Selection.Test != rep.Test || meta.Classes != 16 {
				t.Fatalf("model.json: version %d task %q link %+v typed target %v selection %+v; report epoch %d test %+v",
					meta.Version, meta.Task, meta.Link, meta.Typed, meta.Selection, rep.SelectedEpoch, rep.Test)
			}
			if n := len(meta.Tensors); (rep.Decoder == link.DecoderMLP) != (meta.Tensors[n-1].Name == "decoder.lins.1.bias") ||
				!strings.HasPrefix(meta.Tensors[0].Name, "convs.0.convs.<") {
				t.Errorf("tensors %v", meta.Tensors)
			}

			evPath := filepath.Join(d, "eval.json")
			code, out, errOut = strata(t, "--quiet", "evaluate", "--model", m, "--dataset", ds, "--report", evPath)
			if code != 0 {
				t.Fatalf("evaluate: exit %d: %s", code, errOut)
			}
			ev := readLinkEvaluation(t, evPath)
			for _, c := range []struct {
				what      string
				got, want link.Metrics
			}{{"validation", ev.Val, rep.Val}, {"test", ev.Test, rep.Test}} {
				if c.got.AUC != c.want.AUC || c.got.MRR != c.want.MRR || c.got.Hits != c.want.Hits || c.got.Loss != c.want.Loss {
					t.Errorf("evaluate's %s metrics %+v, the report's %+v", c.what, c.got, c.want)
				}
			}
			if ev.Split != rep.Split || ev.ReportMatches == nil || !*ev.ReportMatches || !strings.Contains(out, "equal to epoch") ||
				!strings.Contains(out, "relation            author___writes___paper") {
				t.Errorf("evaluate does not confirm the report (split %+v, report's %+v):\n%s", ev.Split, rep.Split, out)
			}

			emb := filepath.Join(d, "emb.npy")
			if code, out, errOut := strata(t, "--quiet", "embed", "--model", m, "--dataset", ds, "--out", emb); code != 0 || !strings.Contains(out, "(embeddings, author nodes)") {
				t.Fatalf("embed: exit %d: %s%s", code, out, errOut)
			}
			if r, c, _ := readMatrix(t, emb); c != 16 || r == 0 {
				t.Errorf("embed gives %d x %d, want authors x 16", r, c)
			}

			pairs := filepath.Join(d, "pairs.npy")
			writePairs(t, pairs, []int32{0}, []int32{1})
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"predict", "--pairs", pairs}, "typed link model (author___writes___paper)"},
				{[]string{"predict"}, "typed link-prediction model"},
				{[]string{"evaluate", "--devices", "cpu:2"}, "--devices"},
			} {
				args := append([]string{"--quiet"}, c.args...)
				args = append(args, "--model", m, "--dataset", ds)
				if c.args[0] == "predict" {
					args = append(args, "--out", filepath.Join(d, "p.npy"))
				}
				code, _, errOut := strata(t, args...)
				if code == 0 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
					t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, errOut, c.want)
				}
			}
		})
	}
}
