package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
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

// TestTypedPyGReference: the logits of 'strata predict' equal, within
// 1e-4, those of the PyG model docs/models.md describes, computed here in
// float64 from model.safetensors by its PyG names alone (HeteroConv of
// SAGEConv: lin_l on the mean of the sources, its bias, lin_r on the
// destination; roots.K.<type>: a Linear), on ogbn-mag's tiny sample: its
// authors have no features (a column of ones) and no relation enters
// them, so hsage gives them a root.
func TestTypedPyGReference(t *testing.T) {
	mag := filepath.Join("..", "..", "dataset", "importer", "testdata", "ogbn-mag-tiny")
	h, err := importer.LoadHetero(importer.OGBHetero, mag, importer.Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"hsage", "rgcn"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			m, logits := filepath.Join(dir, "m"), filepath.Join(dir, "logits.npy")
			if code, _, errb := strata(t, "--quiet", "train", "--model", kind, "--dataset", mag, "--epochs", "2", "--hidden", "8", "--layers", "3", "--save", m); code != 0 {
				t.Fatalf("train: %s", errb)
			}
			if code, _, errb := strata(t, "--quiet", "predict", "--model", m, "--dataset", mag, "--out", logits); code != 0 {
				t.Fatalf("predict: %s", errb)
			}
			saved, err := model.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			if roots := saved.Meta.Typed.Layers[0].Roots; !slices.Contains(roots, "author") {
				t.Fatalf("layer 0 roots %v: the featureless author, which no relation enters, needs one", roots)
			}
			rows, cols, got := readMatrix(t, logits)
			want, wcols := pygReference(t, m, h)
			if rows*cols != len(want) || cols != wcols {
				t.Fatalf("predict wrote %d x %d, the reference has %d values of %d columns", rows, cols, len(want), wcols)
			}
			var worst float64
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i])-want[i]))
			}
			if worst > 1e-4 {
				t.Fatalf("predict vs the PyG reference: max |diff| %g > 1e-4", worst)
			}
			if worst == 0 {
				t.Fatalf("no difference at all: the reference is suspiciously Strata's own float32 path")
			}
			t.Logf("%s: %d x %d logits, max |diff| %.3g", kind, rows, cols, worst)
		})
	}
}

// pygReference computes the target type's logits of the saved model in
// dir on h from the tensors' PyG names.
func pygReference(t *testing.T, dir string, h *dataset.Hetero) ([]float64, int) {
	t.Helper()
	metaBytes, err := os.ReadFile(filepath.Join(dir, model.MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var meta model.Meta
	if err := json.Unmarshal(metaBytes, &meta); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, model.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Deserialize(raw)
	if err != nil {
		t.Fatal(err)
	}
	// tensor returns a [out, in] matrix (or [out] vector) by PyG name; nil when absent.
	tensor := func(name string) (data []float64, out, in int) {
		tv, ok := st.Tensor(name)
		if !ok {
			return nil, 0, 0
		}
		shape := tv.Shape()
		out, in = int(shape[0]), 1
		if len(shape) == 2 {
			in = int(shape[1])
		}
		b := tv.Data()
		data = make([]float64, len(b)/4)
		for i := range data {
			data[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return data, out, in
	}
	type mat struct {
		n, w int
		v    []float64
	}
	linear := func(x mat, name string) mat { // x W^T
		w, out, in := tensor(name)
		if w == nil || in != x.w {
			t.Fatalf("tensor %s missing or of width %d, input %d", name, in, x.w)
		}
		y := mat{x.n, out, make([]float64, x.n*out)}
		for i := range x.n {
			for o := range out {
				var s float64
				for j := range in {
					s += x.v[i*in+j] * w[o*in+j]
				}
				y.v[i*out+o] = s
			}
		}
		return y
	}
	addBias := func(y mat, name string) {
		b, _, _ := tensor(name)
		if b == nil {
			t.Fatalf("tensor %s missing", name)
		}
		for i := range y.n {
			for o := range y.w {
				y.v[i*y.w+o] += b[o]
			}
		}
	}
	add := func(acc map[string]mat, ty string, y mat) {
		if a, ok := acc[ty]; ok {
			for i := range a.v {
				a.v[i] += y.v[i]
			}
			return
		}
		acc[ty] = y
	}
	x := map[string]mat{}
	for _, nt := range h.NodeTypes {
		n, w := int(nt.NumNodes), max(nt.FeatDim, 1)
		m := mat{n, w, make([]float64, n*w)}
		for i := range m.v {
			m.v[i] = 1
			if nt.FeatDim > 0 {
				m.v[i] = float64(nt.Features[i])
			}
		}
		x[nt.Name] = m
	}
	relIndex := map[string]int{}
	for r := range h.EdgeTypes {
		relIndex[h.EdgeTypeName(r)] = r
	}
	for k, layer := range meta.Typed.Layers {
		out := map[string]mat{}
		for _, name := range layer.Convs {
			et := h.EdgeTypes[relIndex[name]]
			src, dst := x[h.NodeTypes[et.Src].Name], x[h.NodeTypes[et.Dst].Name]
			mean := mat{dst.n, src.w, make([]float64, dst.n*src.w)}
			for v := range dst.n {
				lo, hi := et.In.Indptr[v], et.In.Indptr[v+1]
				for e := lo; e < hi; e++ {
					u := int(et.In.Indices[e])
					for j := range src.w {
						mean.v[v*src.w+j] += src.v[u*src.w+j] / float64(hi-lo)
					}
				}
			}
			c := "convs." + strconv.Itoa(k) + ".convs.<" + strings.ReplaceAll(name, ".", "#") + ">."
			y := linear(mean, c+"lin_l.weight")
			if b, _, _ := tensor(c + "lin_l.bias"); b != nil {
				addBias(y, c+"lin_l.bias")
			}
			if w, _, _ := tensor(c + "lin_r.weight"); w != nil {
				add(out, h.NodeTypes[et.Dst].Name, linear(dst, c+"lin_r.weight"))
			}
			add(out, h.NodeTypes[et.Dst].Name, y)
		}
		for _, ty := range layer.Roots {
			c := "roots." + strconv.Itoa(k) + "." + strings.ReplaceAll(ty, ".", "#") + "."
			y := linear(x[ty], c+"weight")
			addBias(y, c+"bias")
			add(out, ty, y)
		}
		if k < len(meta.Typed.Layers)-1 {
			for _, m := range out {
				for i, v := range m.v {
					m.v[i] = max(v, 0)
				}
			}
		}
		x = out
	}
	y := x[meta.Typed.Target]
	return y.v, y.w
}
