package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// built makes a model of kind with fresh nn weights and its Meta.
func built(t testing.TB, kind string) *Model {
	t.Helper()
	cfg := train.Defaults(kind).Common
	cfg.Layers, cfg.Hidden = 3, 5
	if kind == train.GAT {
		cfg.Heads, cfg.OutHeads = 3, 2
	}
	meta := NewMeta(cfg, 11, 4)
	meta.Features = Features{RowNorm: train.RowNormAuto, RowNormalized: true, Storage: Sparse}
	meta.Dataset = Dataset{Name: "toy", Fingerprint: "v1:00", Nodes: 9, Edges: 20}
	meta.Selection = Selected{Rule: train.SelectBest, Epoch: 2, Epochs: 3, ValAccuracy: 0.5}
	meta.Training = json.RawMessage(`{"model":"` + kind + `"}`)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.New(b, meta.Config())
	if err != nil {
		t.Fatal(err)
	}
	return distinctModel(t, b, meta, m.Params())
}

// TestRoundTrip: Save then Load gives back every parameter bit for bit,
// and the file holds PyG's names, shapes and layouts.
func TestRoundTrip(t *testing.T) {
	wantNames := map[string][]string{
		train.SAGE: {"convs.0.lin_r.weight", "convs.0.lin_l.weight", "convs.0.lin_l.bias", "convs.2.lin_l.bias"},
		train.GCN:  {"convs.0.lin.weight", "convs.0.bias", "convs.2.lin.weight", "convs.2.bias"},
		train.GAT:  {"convs.0.lin.weight", "convs.0.att_src", "convs.0.att_dst", "convs.0.bias", "convs.2.att_dst"},
	}
	for _, kind := range []string{train.SAGE, train.GCN, train.GAT} {
		t.Run(kind, func(t *testing.T) {
			m := built(t, kind)
			dir := filepath.Join(t.TempDir(), "new", "dir")
			if err := Save(dir, m); err != nil {
				t.Fatal(err)
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			sameParams(t, got.Params, m.Params)
			st := readWeights(t, dir)
			for _, name := range wantNames[kind] {
				if _, ok := st.Tensor(name); !ok {
					t.Errorf("no tensor %s in %v", name, st.Names())
				}
			}
			// The first layer's weight is [out, in]: the transpose of nn's
			// [in, out] (in 11).
			var w string
			switch kind {
			case train.SAGE:
				w = "convs.0.lin_l.weight" // the neighbors' weight, nn's layer0.neigh.weight
			default:
				w = "convs.0.lin.weight"
			}
			tv, _ := st.Tensor(w)
			shape := tv.Shape()
			if len(shape) != 2 || shape[1] != 11 {
				t.Fatalf("%s has shape %v, want [out, 11]", w, shape)
			}
			var src nn.NamedTensor
			for _, p := range m.Params {
				if p.Name == map[string]string{train.SAGE: "layer0.neigh.weight", train.GCN: "layer0.weight", train.GAT: "layer0.weight"}[kind] {
					src = p
				}
			}
			in, out := src.Rows, src.Cols
			for i := range in {
				for j := range out {
					v := math.Float32frombits(binary.LittleEndian.Uint32(tv.Data()[4*(j*in+i):]))
					if v != src.Data[i*out+j] {
						t.Fatalf("%s[%d][%d] = %v, want nn's [%d][%d] = %v", w, j, i, v, i, j, src.Data[i*out+j])
					}
				}
			}
			if kind == train.GAT {
				tv, _ := st.Tensor("convs.2.att_src")
				if s := tv.Shape(); len(s) != 3 || s[0] != 1 || s[1] != 2 || s[2] != 4 {
					t.Errorf("output layer att_src has shape %v, want [1 2 4] (out heads 2, 4 classes)", s)
				}
				tv, _ = st.Tensor("convs.2.bias")
				if s := tv.Shape(); len(s) != 1 || s[0] != 4 {
					t.Errorf("output layer bias has shape %v, want [4] (heads averaged)", s)
				}
			}
			var tr bytes.Buffer
			json.Compact(&tr, got.Meta.Training)
			if got.Meta.Selection.Epoch != 2 || got.Meta.Dataset.Fingerprint != "v1:00" || tr.String() != string(m.Meta.Training) {
				t.Errorf("metadata changed: %+v", got.Meta)
			}
		})
	}
}

// TestLoadRefuses: each broken model directory gets a *FormatError
// naming the file and the problem.
func TestLoadRefuses(t *testing.T) {
	m := built(t, train.SAGE)
	edits := []struct {
		name string
		edit func(dir string)
		file string
		want string
	}{
		{"missing meta", func(dir string) { os.Remove(filepath.Join(dir, MetaFile)) }, MetaFile, "missing"},
		{"missing weights", func(dir string) { os.Remove(filepath.Join(dir, WeightsFile)) }, WeightsFile, "missing"},
		{"version", editMeta(func(m map[string]any) { m["version"] = 9 }), MetaFile, "format version 9, this build reads versions 1, 2 and 3"},
		{"architecture", editMeta(func(m map[string]any) { m["architecture"] = "gin" }), MetaFile, `architecture "gin"`},
		{"unknown field", editMeta(func(m map[string]any) { m["extra"] = 1 }), MetaFile, `unknown field "extra"`},
		{"huge hidden", editMeta(func(m map[string]any) { m["hidden"] = 1 << 40 }), MetaFile, "hidden"},
		{"other layers", editMeta(func(m map[string]any) { m["layers"] = 2 }), MetaFile, "tensors listed"},
		{"syntax", func(dir string) { os.WriteFile(filepath.Join(dir, MetaFile), []byte(`{"format": `), 0o644) }, MetaFile, "JSON"},
		{"flipped byte", func(dir string) {
			p := filepath.Join(dir, WeightsFile)
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 1
			os.WriteFile(p, b, 0o644)
		}, WeightsFile, "SHA-256"},
		{"truncated", func(dir string) {
			p := filepath.Join(dir, WeightsFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, WeightsFile, "SHA-256"},
		{"directory", func(dir string) {
			p := filepath.Join(dir, WeightsFile)
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}, WeightsFile, "not a regular file"},
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Save(dir, m); err != nil {
				t.Fatal(err)
			}
			tc.edit(dir)
			_, err := Load(dir)
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) || filepath.Base(fe.Path) != tc.file {
				t.Fatalf("error %v, want a *FormatError on %s containing %q", err, tc.file, tc.want)
			}
		})
	}
}

// TestWrongTensor: a file whose tensors have the right hash but a wrong
// dtype, shape or value is refused by name.
func TestWrongTensor(t *testing.T) {
	m := built(t, train.GCN)
	meta, weights := encode(t, m)
	st, err := safetensors.Deserialize(weights)
	if err != nil {
		t.Fatal(err)
	}
	views := map[string]safetensors.TensorView{}
	for _, nt := range st.Tensors() {
		views[nt.Name] = nt.TensorView
	}
	cases := []struct {
		name string
		edit func(v map[string]safetensors.TensorView)
		want string
	}{
		{"dtype", func(v map[string]safetensors.TensorView) {
			tv := v["convs.0.bias"]
			nv, _ := safetensors.NewTensorView(safetensors.I32, tv.Shape(), tv.Data())
			v["convs.0.bias"] = nv
		}, "convs.0.bias has dtype I32"},
		{"shape", func(v map[string]safetensors.TensorView) {
			tv := v["convs.0.bias"]
			nv, _ := safetensors.NewTensorView(safetensors.F32, []uint64{1, tv.Shape()[0]}, tv.Data())
			v["convs.0.bias"] = nv
		}, "convs.0.bias has shape [1 5], want [5]"},
		{"nan", func(v map[string]safetensors.TensorView) {
			tv := v["convs.1.bias"]
			data := append([]byte(nil), tv.Data()...)
			binary.LittleEndian.PutUint32(data[4:], math.Float32bits(float32(math.NaN())))
			nv, _ := safetensors.NewTensorView(safetensors.F32, tv.Shape(), data)
			v["convs.1.bias"] = nv
		}, "convs.1.bias: value 1 is NaN"},
		{"renamed", func(v map[string]safetensors.TensorView) {
			v["convs.1.lin_l.weight"] = v["convs.1.lin.weight"]
			delete(v, "convs.1.lin.weight")
		}, "convs.1.lin.weight is missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := map[string]safetensors.TensorView{}
			for k, x := range views {
				v[k] = x
			}
			tc.edit(v)
			w, err := safetensors.Serialize(v, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(withHash(t, meta, w), w)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func editMeta(f func(m map[string]any)) func(dir string) {
	return func(dir string) {
		p := filepath.Join(dir, MetaFile)
		b, _ := os.ReadFile(p)
		var m map[string]any
		json.Unmarshal(b, &m)
		f(m)
		b, _ = json.Marshal(m)
		os.WriteFile(p, b, 0o644)
	}
}

// encode returns the bytes Save writes.
func encode(t testing.TB, m *Model) (meta, weights []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := Save(dir, m); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	weights, err = os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	return meta, weights
}

// withHash returns meta with weights_sha256 set to weights' hash (meta
// unchanged when it is not a JSON object).
func withHash(t testing.TB, meta, weights []byte) []byte {
	var m map[string]any
	if json.Unmarshal(meta, &m) != nil || m == nil {
		return meta
	}
	sum := sha256.Sum256(weights)
	m["weights_sha256"] = hex.EncodeToString(sum[:])
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzLoad: no model.json and safetensors bytes make the reader panic or
// allocate beyond the bounds; whatever it accepts has the shapes its
// metadata declares. Each input runs as given and with the hash patched
// to the weights', so the safetensors decoding is reached.
func FuzzLoad(f *testing.F) {
	for _, kind := range []string{train.SAGE, train.GCN, train.GAT} {
		meta, weights := encode(f, built(f, kind))
		f.Add(meta, weights)
	}
	for _, kind := range []string{train.RGCN, train.HSAGE} {
		meta, weights := encode(f, builtTyped(f, kind))
		f.Add(meta, weights)
	}
	f.Add([]byte(`{}`), []byte{})
	f.Add([]byte(`{"format":"strata-model","version":1}`), []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      "))
	f.Fuzz(func(t *testing.T, meta, weights []byte) {
		for _, mb := range [][]byte{meta, withHash(t, meta, weights)} {
			m, err := Parse(mb, weights)
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("error %v is not a *FormatError", err)
				}
				continue
			}
			specs, _ := m.Meta.specs()
			for i, s := range specs {
				p := m.Params[i]
				if p.Name != s.Param || len(p.Data) != s.rows*s.cols {
					t.Fatalf("accepted tensor %s with %d values, want %d", p.Name, len(p.Data), s.rows*s.cols)
				}
			}
		}
	})
}

// sameParams fails t unless got are want's tensors, names, shapes and
// bits.
func sameParams(t *testing.T, got, want []nn.NamedTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d params back, saved %d", len(got), len(want))
	}
	for i, p := range want {
		q := got[i]
		if q.Name != p.Name || q.Rows != p.Rows || q.Cols != p.Cols {
			t.Fatalf("param %d is %s %dx%d, saved %s %dx%d", i, q.Name, q.Rows, q.Cols, p.Name, p.Rows, p.Cols)
		}
		for j := range p.Data {
			if math.Float32bits(q.Data[j]) != math.Float32bits(p.Data[j]) {
				t.Fatalf("%s[%d] = %v, saved %v", p.Name, j, q.Data[j], p.Data[j])
			}
		}
	}
}

// readWeights parses dir's weights file as safetensors.
func readWeights(t *testing.T, dir string) safetensors.SafeTensors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Deserialize(raw)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// distinctModel is meta with params' tensors (read from b), every value
// apart from the others, so that a transposition or swap shows.
func distinctModel(t testing.TB, b backend.Backend, meta Meta, params []*nn.Param) *Model {
	t.Helper()
	ps, err := nn.SaveParams(b, params)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		for j := range ps[i].Data {
			ps[i].Data[j] = float32(i*1000+j) / 7
		}
	}
	return &Model{Meta: meta, Params: ps}
}
