package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/model"
)

func readLinkEvaluation(t *testing.T, path string) LinkEvaluation {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev LinkEvaluation
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestLinkSaveThenEvaluate: 'train --task link --save' on Cora, on one
// device (whole-graph and sampled, dot and mlp decoders) and in the DSP
// engine on cpu:2, then 'evaluate' gives the report's selected epoch's
// AUC, MRR and Hits@K exactly, from the recorded split; embed writes the
// embeddings (the last layer, hidden wide) and a hidden layer.
func TestLinkSaveThenEvaluate(t *testing.T) {
	skipUnderRace(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"gcn full dot last", []string{"--model", "gcn", "--epochs", "3", "--select", "last"}},
		{"sage sampled mlp", []string{"--model", "sage", "--epochs", "2", "--decoder", "mlp", "--batch-size", "2048", "--fanouts", "5,5"}},
		{"sage dsp mlp", []string{"--model", "sage", "--devices", "cpu:2", "--epochs", "2", "--decoder", "mlp", "--batch-size", "2048", "--fanouts", "5,5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, repPath := filepath.Join(dir, "model"), filepath.Join(dir, "report.json")
			code, out, errOut := strata(t, append([]string{"--quiet", "train", "--task", "link", "--hidden", "16", "--save", m, "--report", repPath}, tc.args...)...)
			if code != 0 {
				t.Fatalf("train: exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "model               "+m) {
				t.Errorf("train does not say where the model went:\n%s", out)
			}
			var rep link.Report
			if b, err := os.ReadFile(repPath); err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Epochs) == 0 {
				t.Fatalf("report %s: %v", repPath, err)
			}
			if strings.Contains(tc.name, "last") && rep.SelectedEpoch != len(rep.Epochs) {
				t.Fatalf("--select last selected epoch %d of %d", rep.SelectedEpoch, len(rep.Epochs))
			}
			saved, err := model.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			meta := saved.Meta
			if !meta.IsLink() || meta.Selection.Epoch != rep.SelectedEpoch || *meta.Selection.Test != rep.Test || meta.Link.Decoder != rep.Decoder ||
				meta.Link.Seed != rep.Seed || meta.Classes != 16 || meta.Tensors[0].Name != "convs.0."+map[string]string{"gcn": "lin.weight", "sage": "lin_r.weight"}[rep.Model] {
				t.Fatalf("model.json: task %q link %+v selection %+v tensors %v; report epoch %d test %+v", meta.Task, meta.Link, meta.Selection, meta.Tensors, rep.SelectedEpoch, rep.Test)
			}
			if n := len(meta.Tensors); rep.Decoder == link.DecoderMLP && meta.Tensors[n-1].Name != "decoder.lins.1.bias" {
				t.Errorf("mlp decoder's tensors missing: %v", meta.Tensors)
			}

			evPath := filepath.Join(dir, "eval.json")
			code, out, errOut = strata(t, "--quiet", "evaluate", "--model", m, "--report", evPath)
			if code != 0 {
				t.Fatalf("evaluate: exit %d: %s", code, errOut)
			}
			ev := readLinkEvaluation(t, evPath)
			for _, c := range []struct {
				what      string
				got, want link.Metrics
			}{{"validation", ev.Val, rep.Val}, {"test", ev.Test, rep.Test}} {
				if c.got.AUC != c.want.AUC || c.got.MRR != c.want.MRR || c.got.Hits != c.want.Hits {
					t.Errorf("evaluate's %s metrics %+v, the report's %+v", c.what, c.got, c.want)
				}
			}
			if ev.Split.Test != rep.Split.Test || ev.ReportMatches == nil || !*ev.ReportMatches || !strings.Contains(out, "equal to epoch") {
				t.Errorf("evaluate does not confirm the report (split %+v, report's %+v):\n%s", ev.Split, rep.Split, out)
			}

			emb := filepath.Join(dir, "emb.npy")
			if code, out, errOut := strata(t, "--quiet", "embed", "--model", m, "--out", emb); code != 0 || !strings.Contains(out, "(embeddings)") {
				t.Fatalf("embed: exit %d: %s%s", code, out, errOut)
			}
			if r, c, _ := readMatrix(t, emb); r != int(rep.Graph.Nodes) || c != 16 {
				t.Errorf("embed gives %d x %d, want %d x 16", r, c, rep.Graph.Nodes)
			}
			h1 := filepath.Join(dir, "h1.npy")
			if code, _, errOut := strata(t, "--quiet", "embed", "--model", m, "--layer", "1", "--nodes", writeFile(t, filepath.Join(dir, "ids.txt"), "5 0 5\n"), "--out", h1); code != 0 {
				t.Fatalf("embed --layer 1: exit %d: %s", code, errOut)
			}
			if r, c, _ := readMatrix(t, h1); r != 3 || c != 16 {
				t.Errorf("embed --layer 1 gives %d x %d, want 3 x 16", r, c)
			}
		})
	}
}

// TestLinkModelErrors: a link model where it does not fit, and a damaged
// one, are one-line usage errors naming what is wrong.
func TestLinkModelErrors(t *testing.T) {
	dir := t.TempDir()
	m, node := filepath.Join(dir, "link"), filepath.Join(dir, "node")
	if code, _, errOut := strata(t, "--quiet", "train", "--task", "link", "--model", "gcn", "--epochs", "1", "--hidden", "8", "--save", m); code != 0 {
		t.Fatalf("train link: exit %d: %s", code, errOut)
	}
	if code, _, errOut := strata(t, "--quiet", "train", "--model", "gcn", "--mode", "full", "--epochs", "1", "--hidden", "8", "--save", node); code != 0 {
		t.Fatalf("train node: exit %d: %s", code, errOut)
	}
	// A node model claiming to be a link model.
	fake := filepath.Join(dir, "fake")
	if err := os.MkdirAll(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{model.WeightsFile, model.MetaFile} {
		b, err := os.ReadFile(filepath.Join(node, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == model.MetaFile {
			b = []byte(strings.Replace(string(b), `"strata_version"`, `"task": "link", "strata_version"`, 1))
		}
		writeFile(t, filepath.Join(fake, f), string(b))
	}
	out := filepath.Join(dir, "out.npy")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"predict", "--model", m, "--out", out}, "is a link-prediction model, which has no class logits: 'strata predict --pairs FILE.npy' scores node pairs"},
		{[]string{"evaluate", "--model", m, "--devices", "cpu:2"}, "--devices: a link model is evaluated on one device"},
		{[]string{"evaluate", "--model", m, "--infer-budget", "8MiB"}, "--infer-budget: a link model"},
		{[]string{"evaluate", "--model", fake}, "a link model needs the link section"},
		{[]string{"embed", "--model", m, "--layer", "3", "--out", out}, "--layer 3: the model has layers 1 to 2"},
	} {
		code, _, errOut := strata(t, append([]string{"--quiet"}, tc.args...)...)
		oneLineError(t, strings.Join(tc.args, " "), code, errOut, tc.want)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", tc.args, code)
		}
	}
}

// writePairs writes pairs as a .npy int64 matrix [P, 2].
func writePairs(t *testing.T, path string, src, dst []int32) string {
	t.Helper()
	b := []byte(npy.Magic + "\x01\x00")
	dict := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': (%d, 2), }", len(src))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)+1))
	b = append(append(b, dict...), '\n')
	for i := range src {
		b = binary.LittleEndian.AppendUint64(b, uint64(src[i]))
		b = binary.LittleEndian.AppendUint64(b, uint64(dst[i]))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readVector reads a float32 .npy vector written by predict --pairs.
func readVector(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := npy.ParseHeader(b)
	if err != nil || h.Descr != "<f4" || len(h.Shape) != 1 {
		t.Fatalf("%s: header %+v (%v), want a float32 vector", path, h, err)
	}
	out := make([]float32, h.Shape[0])
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[h.DataOffset+int64(4*i):]))
	}
	return out
}

// TestLinkPredictPairs: 'predict --pairs' scores pairs with the decoder
// from the embeddings embed writes (the whole --dataset graph): the dot
// product, or the MLP recomputed in float64 from the saved tensors; on
// the run's test links and negatives it ranks well. A node model with
// --pairs, and bad pair files, are one-line errors.
func TestLinkPredictPairs(t *testing.T) {
	skipUnderRace(t)
	ds := loadCora(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--model", "gcn", "--epochs", "3"},
		{"--model", "sage", "--epochs", "1", "--decoder", "mlp", "--batch-size", "2048", "--fanouts", "5,5"},
	} {
		m, repPath := filepath.Join(dir, args[1]), filepath.Join(dir, args[1]+".json")
		if code, _, errOut := strata(t, append([]string{"--quiet", "train", "--task", "link", "--hidden", "16", "--save", m, "--report", repPath}, args...)...); code != 0 {
			t.Fatalf("train: exit %d: %s", code, errOut)
		}
		var rep link.Report
		if b, err := os.ReadFile(repPath); err != nil || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("report %s: %v", repPath, err)
		}
		s, err := link.MakeSplit(ds, &rep.Config, nil)
		if err != nil {
			t.Fatal(err)
		}
		src, dst := slices.Concat(s.Test.Src, s.TestNeg.Src), slices.Concat(s.Test.Dst, s.TestNeg.Dst)
		pairs := writePairs(t, filepath.Join(dir, "pairs.npy"), src, dst)
		out, emb := filepath.Join(dir, args[1]+"-scores.npy"), filepath.Join(dir, args[1]+"-emb.npy")
		if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--pairs", pairs, "--out", out); code != 0 {
			t.Fatalf("predict --pairs: exit %d: %s", code, errOut)
		}
		if code, _, errOut := strata(t, "--quiet", "embed", "--model", m, "--out", emb); code != 0 {
			t.Fatalf("embed: exit %d: %s", code, errOut)
		}
		scores := readVector(t, out)
		if len(scores) != len(src) {
			t.Fatalf("%d scores for %d pairs", len(scores), len(src))
		}
		_, d, h := readMatrix(t, emb)
		saved, err := model.Load(m)
		if err != nil {
			t.Fatal(err)
		}
		p := map[string][]float32{}
		for _, q := range saved.Params {
			p[q.Name] = q.Data
		}
		for i := range src {
			u, v := h[int(src[i])*d:][:d], h[int(dst[i])*d:][:d]
			want := 0.0
			if rep.Decoder == link.DecoderDot {
				for j := range u {
					want += float64(u[j]) * float64(v[j])
				}
			} else {
				w0, b0, w1, b1 := p["decoder.lin0.weight"], p["decoder.lin0.bias"], p["decoder.lin1.weight"], p["decoder.lin1.bias"]
				want = float64(b1[0])
				for k := range d {
					z := float64(b0[k])
					for j := range d {
						z += float64(u[j]) * float64(v[j]) * float64(w0[j*d+k])
					}
					want += max(z, 0) * float64(w1[k])
				}
			}
			if math.Abs(float64(scores[i])-want) > 1e-4*max(1, math.Abs(want)) {
				t.Fatalf("%s: pair %d (%d, %d) scores %v, the decoder on embed's rows %v", args[1], i, src[i], dst[i], scores[i], want)
			}
		}
		got, err := link.Evaluate(scores[:s.Test.Len()], scores[s.Test.Len():], rep.HitsK)
		if err != nil || got.AUC < 0.55 {
			t.Errorf("%s: predict --pairs on the test links: %+v (%v), want AUC above 0.55", args[1], got, err)
		}
	}
	node := filepath.Join(dir, "node")
	if code, _, errOut := strata(t, "--quiet", "train", "--model", "gcn", "--mode", "full", "--epochs", "1", "--hidden", "8", "--save", node); code != 0 {
		t.Fatalf("train node: exit %d: %s", code, errOut)
	}
	out := filepath.Join(dir, "x.npy")
	good := writePairs(t, filepath.Join(dir, "good.npy"), []int32{0, 1}, []int32{2, 3})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", node, "--pairs", good}, "--pairs: --model " + node + " is a node-classification model"},
		{[]string{"--model", filepath.Join(dir, "gcn"), "--pairs", writePairs(t, filepath.Join(dir, "far.npy"), []int32{0}, []int32{2708})}, "node 2708 (pair 0) out of range [0, 2708)"},
		{[]string{"--model", filepath.Join(dir, "gcn"), "--pairs", writeFile(t, filepath.Join(dir, "p.txt"), "0 1\n")}, "not a .npy file"},
		{[]string{"--model", filepath.Join(dir, "gcn"), "--pairs", good, "--nodes", writeFile(t, filepath.Join(dir, "n.txt"), "0\n")}, "--nodes: --pairs names the nodes"},
	} {
		code, _, errOut := strata(t, append(append([]string{"--quiet", "predict"}, tc.args...), "--out", out)...)
		oneLineError(t, strings.Join(tc.args, " "), code, errOut, tc.want)
	}
}
