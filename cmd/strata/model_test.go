package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// readMatrix reads a float32 .npy matrix written by predict or embed.
func readMatrix(t *testing.T, path string) (rows, cols int, data []float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := npy.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Descr != "<f4" || len(h.Shape) != 2 || h.FortranOrder {
		t.Fatalf("%s: header %+v, want a C-order float32 matrix", path, h)
	}
	rows, cols = int(h.Shape[0]), int(h.Shape[1])
	raw := b[h.DataOffset:]
	if len(raw) != 4*rows*cols {
		t.Fatalf("%s: %d data bytes for %d x %d", path, len(raw), rows, cols)
	}
	data = make([]float32, rows*cols)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return rows, cols, data
}

func readEvaluation(t *testing.T, path string) Evaluation {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev Evaluation
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func loadCora(t *testing.T) *dataset.Dataset {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestSaveThenEvaluate: in every training mode, 'train --save' then
// 'evaluate' reproduces the report's accuracies of the selected epoch
// exactly; predict's argmax gives the same test accuracy; embed's shapes
// are the layers' widths.
func TestSaveThenEvaluate(t *testing.T) {
	skipUnderRace(t)
	ds := loadCora(t)
	for _, tc := range []struct {
		name string
		args []string
		last bool
	}{
		{"sage sampled", []string{"--epochs", "3"}, false},
		{"sage sampled last", []string{"--epochs", "3", "--select", "last", "--hidden", "16"}, true},
		{"gcn full", []string{"--model", "gcn", "--epochs", "15"}, false},
		{"gat full", []string{"--model", "gat", "--epochs", "6", "--heads", "2"}, false},
		{"sage dsp", []string{"--devices", "cpu:2", "--epochs", "2", "--hidden", "16"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && (tc.name == "gat full" || tc.name == "sage sampled last") {
				t.Skip("-short: the other modes cover the path")
			}
			dir := t.TempDir()
			m, rep := filepath.Join(dir, "new", "model"), filepath.Join(dir, "report.json")
			code, out, errOut := strata(t, append([]string{"--quiet", "train", "--save", m, "--report", rep}, tc.args...)...)
			if code != 0 {
				t.Fatalf("train: exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "model               "+m) {
				t.Errorf("train does not say where the model went:\n%s", out)
			}
			// Every mode's report extends train.Report: read its fields.
			var r train.Report
			if b, err := os.ReadFile(rep); err != nil || json.Unmarshal(b, &r) != nil || len(r.Epochs) == 0 {
				t.Fatalf("report %s: %v", rep, err)
			}
			sel := r.Epochs[r.SelectedEpoch-1]
			if tc.last && r.SelectedEpoch != len(r.Epochs) {
				t.Fatalf("--select last selected epoch %d of %d", r.SelectedEpoch, len(r.Epochs))
			}
			saved, err := model.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			if saved.Meta.Selection.Epoch != r.SelectedEpoch || saved.Meta.Dataset.Fingerprint != ds.Fingerprint() {
				t.Errorf("model.json selection %+v, dataset %+v; report selected epoch %d", saved.Meta.Selection, saved.Meta.Dataset, r.SelectedEpoch)
			}

			evPath := filepath.Join(dir, "eval.json")
			code, out, errOut = strata(t, "--quiet", "evaluate", "--model", m, "--report", evPath)
			if code != 0 {
				t.Fatalf("evaluate: exit %d: %s", code, errOut)
			}
			ev := readEvaluation(t, evPath)
			if ev.TrainAccuracy != sel.TrainAccuracy || ev.ValAccuracy != r.ValAccuracy || ev.TestAccuracy != r.TestAccuracy {
				t.Fatalf("evaluate gives train %v val %v test %v; the report's epoch %d has train %v val %v test %v",
					ev.TrainAccuracy, ev.ValAccuracy, ev.TestAccuracy, r.SelectedEpoch, sel.TrainAccuracy, r.ValAccuracy, r.TestAccuracy)
			}
			if ev.ReportMatches == nil || !*ev.ReportMatches || !strings.Contains(out, "equal to epoch") {
				t.Errorf("evaluate does not confirm the report:\n%s", out)
			}

			logits := filepath.Join(dir, "logits.npy")
			if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--out", logits); code != 0 {
				t.Fatalf("predict: exit %d: %s", code, errOut)
			}
			rows, cols, data := readMatrix(t, logits)
			if rows != int(ds.NumNodes()) || cols != ds.NumClasses {
				t.Fatalf("logits %d x %d, want %d x %d", rows, cols, ds.NumNodes(), ds.NumClasses)
			}
			correct := 0
			for _, v := range ds.Test {
				if nn.Argmax(data[int(v)*cols:(int(v)+1)*cols]) == int(ds.Labels[v]) {
					correct++
				}
			}
			if acc := float64(correct) / float64(len(ds.Test)); acc != r.TestAccuracy {
				t.Errorf("predict's argmax gives test accuracy %v, the report %v", acc, r.TestAccuracy)
			}

			emb := filepath.Join(dir, "emb.npy")
			if code, _, errOut := strata(t, "--quiet", "embed", "--model", m, "--out", emb); code != 0 {
				t.Fatalf("embed: exit %d: %s", code, errOut)
			}
			er, ec, _ := readMatrix(t, emb)
			want := saved.Meta.Hidden * saved.Meta.Heads
			if er != rows || ec != want {
				t.Errorf("embed gives %d x %d, want %d x %d (the hidden layer)", er, ec, rows, want)
			}
			last := filepath.Join(dir, "last.npy")
			if code, _, errOut := strata(t, "--quiet", "embed", "--model", m, "--layer", "2", "--out", last); code != 0 {
				t.Fatalf("embed --layer 2: exit %d: %s", code, errOut)
			}
			_, _, l2 := readMatrix(t, last)
			for i := range data {
				if l2[i] != data[i] {
					t.Fatalf("embed --layer 2 differs from predict's logits at %d", i)
				}
			}
		})
	}
}

// TestPredictNodes: --nodes (text or .npy, in any order, with repeats)
// gives those rows of the whole prediction.
func TestPredictNodes(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	if code, _, errOut := strata(t, "--quiet", "train", "--epochs", "1", "--hidden", "8", "--save", m); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
	all := filepath.Join(dir, "all.npy")
	if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--out", all); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, errOut)
	}
	_, c, full := readMatrix(t, all)
	nodes := []int32{2707, 3, 3, 0, 1500}
	text := writeFile(t, filepath.Join(dir, "nodes.txt"), "# nodes\n2707 3\n3\n0   1500 # last\n")
	vec := filepath.Join(dir, "nodes.npy")
	b := []byte(npy.Magic + "\x01\x00")
	dict := "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"
	b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)+1))
	b = append(append(b, dict...), '\n')
	for _, v := range nodes {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	if err := os.WriteFile(vec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{text, vec} {
		out := filepath.Join(dir, "some.npy")
		if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--nodes", f, "--out", out); code != 0 {
			t.Fatalf("predict --nodes %s: exit %d: %s", f, code, errOut)
		}
		rows, cols, data := readMatrix(t, out)
		if rows != len(nodes) || cols != c {
			t.Fatalf("%s: %d x %d, want %d x %d", f, rows, cols, len(nodes), c)
		}
		for i, v := range nodes {
			for j := range c {
				if data[i*c+j] != full[int(v)*c+j] {
					t.Fatalf("%s: row %d (node %d) differs from the whole prediction", f, i, v)
				}
			}
		}
	}
}

// superset writes Cora plus extra nodes hanging off node anchor (both
// directions; features copied from other nodes, unlabeled) as a dataset
// directory.
func superset(t *testing.T, dir string, extra int, anchor int32) string {
	t.Helper()
	ds := loadCora(t)
	n := ds.NumNodes()
	g := ds.Graph
	var src, dst []graph.NodeID
	for v := int64(0); v < n; v++ {
		for _, u := range g.Indices[g.Indptr[v]:g.Indptr[v+1]] {
			src, dst = append(src, graph.NodeID(v)), append(dst, u)
		}
	}
	for i := range extra {
		w := graph.NodeID(n) + graph.NodeID(i)
		src, dst = append(src, anchor, w), append(dst, w, anchor)
	}
	big, err := graph.FromEdges(n+int64(extra), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	feats := append([]float32(nil), ds.Features...)
	for i := range extra {
		k := (i * 37) % int(n)
		feats = append(feats, ds.Features[k*ds.FeatDim:(k+1)*ds.FeatDim]...)
	}
	labels := append([]int32(nil), ds.Labels...)
	for range extra {
		labels = append(labels, -1)
	}
	out := &dataset.Dataset{Name: "cora-plus", Graph: big, FeatDim: ds.FeatDim, Features: feats, NumClasses: ds.NumClasses,
		Labels: labels, Train: ds.Train, Val: ds.Val, Test: ds.Test}
	path := filepath.Join(dir, "cora-plus")
	if err := dataset.Write(path, out, dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInductiveSuperset: a model trained on Cora scores a superset graph
// (new nodes and edges): a warning, not an error; the new nodes get rows;
// nodes the new edges cannot reach in two hops keep their logits.
func TestInductiveSuperset(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	if code, _, errOut := strata(t, "--quiet", "train", "--epochs", "2", "--hidden", "16", "--save", m); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
	const anchor, extra = 100, 25
	plus := superset(t, dir, extra, anchor)
	base, more := filepath.Join(dir, "base.npy"), filepath.Join(dir, "more.npy")
	if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--out", base); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, errOut)
	}
	code, _, errOut := strata(t, "predict", "--model", m, "--dataset", plus, "--out", more)
	if code != 0 {
		t.Fatalf("predict on the superset: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "inductive use") || !strings.Contains(errOut, "2733 nodes") {
		t.Errorf("no inductive-use warning naming the new dataset:\n%s", errOut)
	}
	_, c, a := readMatrix(t, base)
	rows, _, b := readMatrix(t, more)
	if rows != 2708+extra {
		t.Fatalf("%d rows on the superset, want %d", rows, 2708+extra)
	}
	// Nodes more than one hop from the anchor do not see the new edges in
	// a 2-layer model.
	ds := loadCora(t)
	near := map[int32]bool{anchor: true}
	g := ds.Graph
	for _, u := range g.Indices[g.Indptr[anchor]:g.Indptr[anchor+1]] {
		near[u] = true
	}
	same, changed := 0, 0
	for v := range int32(2708) {
		eq := true
		for j := range c {
			eq = eq && a[int(v)*c+j] == b[int(v)*c+j]
		}
		switch {
		case !near[v] && !eq:
			t.Fatalf("node %d, out of the anchor's reach, changed", v)
		case !near[v]:
			same++
		case !eq:
			changed++
		}
	}
	if changed == 0 || same < 2600 {
		t.Errorf("%d nodes unchanged, %d near the anchor changed: the new edges made no difference", same, changed)
	}
	if code, out, errOut := strata(t, "--quiet", "evaluate", "--model", m, "--dataset", plus); code != 0 || !strings.Contains(out, "test accuracy") {
		t.Fatalf("evaluate on the superset: exit %d: %s%s", code, out, errOut)
	}
}

// TestModelCommandErrors: bad models, datasets, node lists and flags get
// exit 2 and one line naming the problem.
func TestModelCommandErrors(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	if code, _, errOut := strata(t, "--quiet", "train", "--epochs", "1", "--hidden", "8", "--save", m); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
	copyModel := func(name string, edit func(dir string)) string {
		d := filepath.Join(dir, name)
		os.MkdirAll(d, 0o755)
		for _, f := range []string{model.MetaFile, model.WeightsFile} {
			b, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, f), b, 0o644)
		}
		edit(d)
		return d
	}
	otherVersion := copyModel("v9", func(d string) {
		p := filepath.Join(d, model.MetaFile)
		b, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(b), `"version": 1`, `"version": 9`, 1)), 0o644)
	})
	otherArch := copyModel("gin", func(d string) {
		p := filepath.Join(d, model.MetaFile)
		b, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(b), `"architecture": "sage"`, `"architecture": "gin"`, 1)), 0o644)
	})
	corrupt := copyModel("corrupt", func(d string) {
		p := filepath.Join(d, model.WeightsFile)
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0x40
		os.WriteFile(p, b, 0o644)
	})
	noWeights := copyModel("noweights", func(d string) { os.Remove(filepath.Join(d, model.WeightsFile)) })
	tiny := genTiny(t, dir, "tiny", "1")
	out := filepath.Join(dir, "o.npy")
	nodesBad := writeFile(t, filepath.Join(dir, "bad.txt"), "1 2\n3 x\n")
	nodesRange := writeFile(t, filepath.Join(dir, "range.txt"), "1\n2708\n")
	nodesFloat := filepath.Join(dir, "f.npy")
	if err := npy.WriteFloat32(nodesFloat, 1, 2, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	fileNotDir := writeFile(t, filepath.Join(dir, "plain"), "x")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evaluate", "--model", filepath.Join(dir, "none")}, "model.json: missing"},
		{[]string{"evaluate", "--model", otherVersion}, "format version 9, this build reads versions 1, 2 and 3"},
		{[]string{"evaluate", "--model", otherArch}, `architecture "gin"`},
		{[]string{"evaluate", "--model", corrupt}, "SHA-256"},
		{[]string{"predict", "--model", noWeights, "--out", out}, "model.safetensors: missing"},
		{[]string{"evaluate", "--model", m, "--dataset", tiny}, "features per node, the model in"},
		{[]string{"predict", "--model", m, "--nodes", nodesBad, "--out", out}, `line 2: "x" is not a node ID`},
		{[]string{"predict", "--model", m, "--nodes", nodesRange, "--out", out}, "line 2: node 2708 out of range [0, 2708)"},
		{[]string{"predict", "--model", m, "--nodes", nodesFloat, "--out", out}, `dtype "<f4"`},
		{[]string{"predict", "--model", m, "--nodes", filepath.Join(dir, "nope.txt"), "--out", out}, "--nodes"},
		{[]string{"predict", "--model", m, "--out", dir}, "--out"},
		{[]string{"embed", "--model", m, "--layer", "3", "--out", out}, "--layer 3: the model has layers 1 to 2"},
		{[]string{"predict", "--model", m, "--infer-budget", "all", "--out", out}, "--infer-budget"},
		{[]string{"predict", "--out", out}, "--model"},
		{[]string{"train", "--epochs", "1", "--save", filepath.Join(fileNotDir, "m")}, "--save"},
	} {
		code, _, errOut := strata(t, append([]string{"--quiet"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", tc.args, code, errOut, tc.want)
		}
	}
}

// FuzzParseNodes: no --nodes file makes the parser panic; what it accepts
// is in range.
func FuzzParseNodes(f *testing.F) {
	f.Add([]byte("1 2 3\n# c\n4\n"))
	f.Add([]byte(npy.Magic + "\x01\x00\x3c\x00{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }    \n\x01\x00\x00\x00"))
	f.Add([]byte("-1\n"))
	f.Add([]byte("99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const n = 1000
		v, err := parseNodes("f", b, n)
		if err != nil {
			return
		}
		for _, x := range v {
			if x < 0 || x >= n {
				t.Fatalf("accepted node %d", x)
			}
		}
	})
}

// numpyPython returns a Python interpreter that has NumPy, or skips.
func numpyPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if err := exec.Command(py, "-c", "import numpy").Run(); err == nil {
			return py
		}
	}
	t.Skip("no python3 with numpy here: the PyG mapping is checked by scripts/pyg_check.py on the GPU host")
	return ""
}

// TestPyGNumpyReference: scripts/pyg_check.py --numpy (PyG 2.8's GCNConv,
// SAGEConv and GATConv written out in NumPy, reading model.safetensors by
// PyG's names) gives strata predict's logits within 1e-4, for each model.
func TestPyGNumpyReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: about 20 s of NumPy")
	}
	py := numpyPython(t)
	dir := t.TempDir()
	cora := filepath.Join(dir, "cora")
	if err := dataset.Write(cora, loadCora(t), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--model", "sage", "--epochs", "2"},
		{"--model", "gcn", "--epochs", "10", "--layers", "3"},
		{"--model", "gat", "--epochs", "3", "--heads", "3", "--out-heads", "2", "--hidden", "4"},
	} {
		m := filepath.Join(dir, args[1])
		if code, _, errOut := strata(t, append([]string{"--quiet", "train", "--dataset", cora, "--save", m}, args...)...); code != 0 {
			t.Fatalf("train %v: exit %d: %s", args, code, errOut)
		}
		logits := filepath.Join(m, "logits.npy")
		if code, _, errOut := strata(t, "--quiet", "predict", "--model", m, "--dataset", cora, "--out", logits); code != 0 {
			t.Fatalf("predict: exit %d: %s", code, errOut)
		}
		out, err := exec.Command(py, "../../scripts/pyg_check.py", "--numpy", "--model", m, "--dataset", cora, "--logits", logits).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "argmax agreement 1.0000") {
			t.Errorf("%v: pyg_check.py --numpy: %v\n%s", args, err, out)
		}
	}
}
