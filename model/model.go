package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/nlpodyssey/safetensors"

	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/train"
)

// File names inside a model directory.
const (
	MetaFile    = "model.json"
	WeightsFile = "model.safetensors"
)

// Format and Version identify model.json's layout; a reader refuses
// another format or version by name.
const (
	Format  = "strata-model"
	Version = 1
)

// Bounds of what a reader accepts before it sizes anything.
const (
	MaxMetaBytes   = 1 << 20
	MaxHeaderBytes = 1 << 20 // the safetensors JSON header
	MaxInDim       = 1 << 20
	MaxClasses     = 1 << 20
	MaxParamBytes  = 16 << 30
)

// Meta is model.json.
type Meta struct {
	Format        string `json:"format"`
	Version       int    `json:"version"`
	StrataVersion string `json:"strata_version"`
	// Task is what the model does: node classification ("" or
	// TaskNode), or link prediction (TaskLink: format version
	// VersionLink, with the Link section).
	Task string `json:"task,omitempty"`
	// Architecture is the model kind: gcn, sage or gat, or the typed
	// rgcn and hsage.
	Architecture string `json:"architecture"`
	Layers       int    `json:"layers"`
	InDim        int    `json:"in_dim"`
	Hidden       int    `json:"hidden"` // per head for gat
	// Classes is the output layer's width: the class count, or for a
	// link model the embedding width (Hidden).
	Classes  int `json:"classes"`
	Heads    int `json:"heads"`     // gat: heads of the hidden layers (concatenated); 1 otherwise
	OutHeads int `json:"out_heads"` // gat: heads of the output layer (averaged); 1 otherwise
	// NegativeSlope is GAT's LeakyReLU slope (0 for the others).
	NegativeSlope float32 `json:"negative_slope"`
	// Activation is the function between layers: relu (gcn, sage) or
	// elu (gat).
	Activation string   `json:"activation"`
	Features   Features `json:"features"`
	Dataset    Dataset  `json:"dataset"`
	Selection  Selected `json:"selection"`
	// Mode is the training mode (sampled, full, fullgraph) and Training
	// its configuration as the report has it.
	Mode     string          `json:"mode"`
	Training json.RawMessage `json:"training"`
	// Tensors lists model.safetensors' tensors and the Strata parameter
	// each one holds.
	Tensors []Tensor `json:"tensors"`
	// WeightsSHA256 is the hex SHA-256 of model.safetensors.
	WeightsSHA256 string `json:"weights_sha256"`
	// Typed describes a typed model's graph (architecture rgcn or hsage,
	// format version VersionTyped); absent for the others.
	Typed *Typed `json:"typed,omitempty"`
	// Link describes a link-prediction model's decoder and edge split;
	// absent for the others.
	Link *Link `json:"link,omitempty"`
}

// Features says how the features were prepared for the model: inputs
// of other data must be prepared the same way.
type Features struct {
	// RowNorm is the setting (auto, on, off), RowNormalized what it
	// decided: every feature row divided by its sum.
	RowNorm       string `json:"row_norm"`
	RowNormalized bool   `json:"row_normalized"`
	// Storage is how training's evaluation read them, sparse or dense,
	// which the evaluate command repeats so that its sums round alike.
	Storage string `json:"storage"`
}

// Storages of Features.Storage.
const (
	Sparse = "sparse"
	Dense  = "dense"
)

// Dataset identifies the data the model was trained on.
type Dataset struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"` // dataset.Dataset.Fingerprint
	Nodes       int64  `json:"nodes"`
	Edges       int64  `json:"edges"`
	Directed    bool   `json:"directed"`
}

// Selected is the epoch whose parameters were saved.
type Selected struct {
	// Rule is best (the best validation accuracy; a link model's best
	// validation AUC) or last.
	Rule   string `json:"rule"`
	Epoch  int    `json:"epoch"` // 1-based
	Epochs int    `json:"epochs"`
	// The accuracies training's evaluation gave that epoch (0 for a link
	// model).
	TrainAccuracy float64 `json:"train_accuracy"`
	ValAccuracy   float64 `json:"val_accuracy"`
	TestAccuracy  float64 `json:"test_accuracy"`
	// Val and Test are a link model's metrics of that epoch (AUC, MRR,
	// Hits@K, loss).
	Val  *link.Metrics `json:"val,omitempty"`
	Test *link.Metrics `json:"test,omitempty"`
	// Note explains a selection other than the rule asked (a resumed
	// run whose best epoch came before the resume).
	Note string `json:"note,omitempty"`
}

// Tensor is one entry of Meta.Tensors.
type Tensor struct {
	Name   string `json:"name"`   // in model.safetensors (PyG's)
	Param  string `json:"param"`  // Strata's nn parameter
	Shape  []int  `json:"shape"`  // in model.safetensors
	Layout string `json:"layout"` // how the values relate to the parameter: transposed, reshaped or same
}

// Model is a saved model in memory: its description and its parameters,
// under Strata's names and in Strata's layout (nn.SaveParams').
type Model struct {
	Meta   Meta
	Params []nn.NamedTensor
}

// Config is the nn configuration of the model, for nn.New (no dropout:
// a saved model is for inference).
func (m *Meta) Config() nn.Config {
	c := nn.Config{Kind: m.Architecture, InDim: m.InDim, Hidden: m.Hidden, OutDim: m.Classes, Layers: m.Layers, NoDropout: true}
	if m.Architecture == nn.KindGAT {
		c.Heads, c.OutHeads, c.NegativeSlope = m.Heads, m.OutHeads, m.NegativeSlope
	}
	return c
}

// FormatError reports a model directory that cannot be read: the file
// and what is wrong with it.
type FormatError struct {
	Path string
	Msg  string
}

func (e *FormatError) Error() string { return "model: " + e.Path + ": " + e.Msg }

func bad(path, format string, args ...any) error {
	return &FormatError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// NewMeta describes a model of cfg (train's common settings) for inDim
// features and classes classes; the caller fills in the features, the
// dataset, the selection and the training configuration.
func NewMeta(cfg train.Common, inDim, classes int) Meta {
	mc := cfg.ModelConfig(inDim, classes)
	m := Meta{Format: Format, Version: Version, StrataVersion: train.Version, Architecture: cfg.Model,
		Layers: cfg.Layers, InDim: inDim, Hidden: cfg.Hidden, Classes: classes, Heads: 1, OutHeads: 1, Activation: "relu"}
	if cfg.Model == train.GAT {
		m.Heads, m.OutHeads, m.Activation = cfg.Heads, cfg.OutHeads, "elu"
		m.NegativeSlope = 0.2 // nn's default, which training keeps
		if mc.NegativeSlope != 0 {
			m.NegativeSlope = mc.NegativeSlope
		}
	}
	return m
}

// check validates the dimensions and names of m (read from path).
func (m *Meta) check(path string) error {
	switch {
	case m.Format != Format:
		return bad(path, "format %q, want %q", m.Format, Format)
	case m.Version != Version && m.Version != VersionTyped && m.Version != VersionLink:
		return bad(path, "format version %d, this build reads versions %d, %d and %d", m.Version, Version, VersionTyped, VersionLink)
	}
	switch m.Task {
	case "", TaskNode:
		if m.Link != nil || m.Selection.Val != nil || m.Selection.Test != nil {
			return bad(path, "a link section or link metrics in a node-classification model (task %q)", m.Task)
		}
		if m.Version == VersionLink {
			return bad(path, "format version %d is a link model's, but the task is %q", VersionLink, m.Task)
		}
	case TaskLink:
		if err := m.checkLink(path); err != nil {
			return err
		}
	default:
		return bad(path, "task %q is not node or link", clip(m.Task))
	}
	version := Version // of a homogeneous model
	if m.IsLink() {
		version = VersionLink
	}
	typed := m.Architecture == nn.KindRGCN || m.Architecture == nn.KindHSAGE
	switch {
	case typed && m.Typed == nil:
		return bad(path, "a %s model needs the typed section (node types, relations, target)", m.Architecture)
	case typed:
	case m.Typed != nil:
		return bad(path, "a typed section in a %s model: only rgcn and hsage are typed", clip(m.Architecture))
	case m.Architecture != nn.KindGCN && m.Architecture != nn.KindSAGE && m.Architecture != nn.KindGAT:
		return bad(path, "architecture %q is not gcn, sage, gat, rgcn or hsage", clip(m.Architecture))
	case m.Version != version:
		return bad(path, "a %s model is format version %d, not %d", m.Architecture, version, m.Version)
	}
	inDimLo := 1
	if typed {
		inDimLo = 0 // checkTyped requires 0
	}
	in := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return bad(path, "%s %d not in [%d, %d]", name, v, lo, hi)
		}
		return nil
	}
	for _, c := range []struct {
		name      string
		v, lo, hi int
	}{{"layers", m.Layers, 1, train.MaxLayers}, {"in_dim", m.InDim, inDimLo, MaxInDim}, {"hidden", m.Hidden, 1, train.MaxWidth},
		{"classes", m.Classes, 1, MaxClasses}, {"heads", m.Heads, 1, train.MaxHeads}, {"out_heads", m.OutHeads, 1, train.MaxHeads}} {
		if err := in(c.name, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	want := "relu"
	if m.Architecture == nn.KindGAT {
		want = "elu"
		if !(m.NegativeSlope >= 0 && m.NegativeSlope <= 1) {
			return bad(path, "negative_slope %v not in [0, 1]", m.NegativeSlope)
		}
	} else if m.Heads != 1 || m.OutHeads != 1 || m.NegativeSlope != 0 {
		return bad(path, "%s has heads %d, out_heads %d and negative_slope %v: only gat has attention", m.Architecture, m.Heads, m.OutHeads, m.NegativeSlope)
	}
	if m.Activation != want {
		return bad(path, "activation %q, a %s uses %s", m.Activation, m.Architecture, want)
	}
	switch m.Features.Storage {
	case Sparse, Dense:
	default:
		return bad(path, "features.storage %q is not sparse or dense", m.Features.Storage)
	}
	switch m.Features.RowNorm {
	case train.RowNormAuto, train.RowNormOn, train.RowNormOff:
	default:
		return bad(path, "features.row_norm %q is not auto, on or off", m.Features.RowNorm)
	}
	if typed {
		if err := m.checkTyped(path); err != nil {
			return err
		}
	}
	if len(m.WeightsSHA256) != 64 {
		return bad(path, "weights_sha256 %q is not 64 hex digits", clip(m.WeightsSHA256))
	}
	if _, err := hex.DecodeString(m.WeightsSHA256); err != nil {
		return bad(path, "weights_sha256 %q is not 64 hex digits", clip(m.WeightsSHA256))
	}
	specs, total := m.specs()
	if total > MaxParamBytes {
		return bad(path, "the dimensions imply %d bytes of parameters, more than %d", total, int64(MaxParamBytes))
	}
	if len(m.Tensors) != len(specs) {
		return bad(path, "%d tensors listed, a %d-layer %s has %d", len(m.Tensors), m.Layers, m.Architecture, len(specs))
	}
	for i, s := range specs {
		t := m.Tensors[i]
		if t.Name != s.Name || t.Param != s.Param || t.Layout != s.Layout || fmt.Sprint(t.Shape) != fmt.Sprint(s.Shape) {
			return bad(path, "tensor %d is %q (%s, %v, %s), want %q (%s, %v, %s)", i, clip(t.Name), clip(t.Param), t.Shape, clip(t.Layout), s.Name, s.Param, s.Shape, s.Layout)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// spec is one tensor the architecture has: its names, its safetensors
// shape and Strata's parameter shape.
type spec struct {
	Tensor
	rows, cols int
}

// specs lists m's tensors in order (nn's parameter order) and their
// total bytes; every dimension must already be in bounds.
func (m *Meta) specs() ([]spec, int64) {
	if m.Typed != nil {
		return m.typedSpecs()
	}
	var out []spec
	var total int64
	add := func(name, param, layout string, rows, cols int, shape ...int) {
		out = append(out, spec{Tensor: Tensor{Name: name, Param: param, Shape: shape, Layout: layout}, rows: rows, cols: cols})
		total += 4 * int64(rows) * int64(cols)
	}
	in := m.InDim
	for k := range m.Layers {
		last := k == m.Layers-1
		out := m.Hidden
		if last {
			out = m.Classes
		}
		conv, layer := fmt.Sprintf("convs.%d.", k), fmt.Sprintf("layer%d.", k)
		switch m.Architecture {
		case nn.KindGCN:
			add(conv+"lin.weight", layer+"weight", "transposed", in, out, out, in)
			add(conv+"bias", layer+"bias", "reshaped", 1, out, out)
			in = out
		case nn.KindSAGE:
			add(conv+"lin_r.weight", layer+"self.weight", "transposed", in, out, out, in)
			add(conv+"lin_l.weight", layer+"neigh.weight", "transposed", in, out, out, in)
			add(conv+"lin_l.bias", layer+"bias", "reshaped", 1, out, out)
			in = out
		default: // gat
			heads, dim := m.Heads, m.Hidden
			if last {
				heads, dim = m.OutHeads, m.Classes
			}
			hd := heads * dim
			width := hd
			if last {
				width = dim
			}
			add(conv+"lin.weight", layer+"weight", "transposed", in, hd, hd, in)
			add(conv+"att_src", layer+"attn_l", "reshaped", 1, hd, 1, heads, dim)
			add(conv+"att_dst", layer+"attn_r", "reshaped", 1, hd, 1, heads, dim)
			add(conv+"bias", layer+"bias", "reshaped", 1, width, width)
			in = width
		}
	}
	m.decoderSpecs(add)
	return out, total
}

// Save writes m into dir (created if missing): model.safetensors, then
// model.json with its hash, each atomically. m.Params are the model's
// parameters (nn.SaveParams); m.Meta.Tensors and WeightsSHA256 are filled
// in here.
func Save(dir string, m *Model) error {
	meta := m.Meta
	meta.Format, meta.Version = Format, Version
	if meta.Typed != nil {
		ty := *meta.Typed
		meta.Typed, meta.Version = &ty, VersionTyped
		meta.fillTyped()
	}
	if meta.IsLink() {
		meta.Version = VersionLink
	}
	if meta.StrataVersion == "" {
		meta.StrataVersion = train.Version
	}
	if meta.Training == nil {
		meta.Training = json.RawMessage("null")
	}
	specs, _ := meta.specs()
	meta.Tensors = nil
	for _, s := range specs {
		meta.Tensors = append(meta.Tensors, s.Tensor)
	}
	meta.WeightsSHA256 = strings.Repeat("0", 64) // checked below with the real one
	if err := meta.check(MetaFile); err != nil {
		return err
	}
	byName := make(map[string]nn.NamedTensor, len(m.Params))
	for _, p := range m.Params {
		byName[p.Name] = p
	}
	if len(byName) != len(specs) || len(m.Params) != len(specs) {
		return fmt.Errorf("model: %d parameters for the %d tensors of a %d-layer %s", len(m.Params), len(specs), meta.Layers, meta.Architecture)
	}
	views := make(map[string]safetensors.TensorView, len(specs))
	for _, s := range specs {
		p, ok := byName[s.Param]
		if !ok {
			return fmt.Errorf("model: parameter %q is missing", s.Param)
		}
		if p.Rows != s.rows || p.Cols != s.cols || len(p.Data) != s.rows*s.cols {
			return fmt.Errorf("model: parameter %q is %dx%d (%d values), want %dx%d", s.Param, p.Rows, p.Cols, len(p.Data), s.rows, s.cols)
		}
		data := p.Data
		if s.Layout == "transposed" {
			data = transpose(data, s.rows, s.cols)
		}
		raw := make([]byte, 4*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		shape := make([]uint64, len(s.Shape))
		for i, d := range s.Shape {
			shape[i] = uint64(d)
		}
		tv, err := safetensors.NewTensorView(safetensors.F32, shape, raw)
		if err != nil {
			return fmt.Errorf("model: tensor %s: %w", s.Name, err)
		}
		views[s.Name] = tv
	}
	var buf bytes.Buffer
	if err := safetensors.SerializeToWriter(views, map[string]string{"format": "pt", "strata_model": fmt.Sprint(Version)}, &buf); err != nil {
		return fmt.Errorf("model: encoding the weights: %w", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	meta.WeightsSHA256 = hex.EncodeToString(sum[:])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, WeightsFile), buf.Bytes()); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, MetaFile), &meta); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return nil
}

// CheckDir checks, before training starts, that dir can receive a model
// (creating it if missing).
func CheckDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	for _, f := range []string{WeightsFile, MetaFile} {
		if err := atomicfile.Check(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	return nil
}

// Load reads the model saved in dir.
func Load(dir string) (*Model, error) {
	mp, wp := filepath.Join(dir, MetaFile), filepath.Join(dir, WeightsFile)
	metaBytes, err := readBounded(mp, MaxMetaBytes)
	if err != nil {
		return nil, err
	}
	meta, err := ParseMeta(mp, metaBytes)
	if err != nil {
		return nil, err
	}
	_, total := meta.specs()
	weights, err := readBounded(wp, 8+MaxHeaderBytes+total)
	if err != nil {
		return nil, err
	}
	params, err := decodeWeights(wp, meta, weights)
	if err != nil {
		return nil, err
	}
	return &Model{Meta: *meta, Params: params}, nil
}

// Parse is Load on the bytes of model.json and model.safetensors.
func Parse(metaBytes, weights []byte) (*Model, error) {
	meta, err := ParseMeta(MetaFile, metaBytes)
	if err != nil {
		return nil, err
	}
	if _, total := meta.specs(); int64(len(weights)) > 8+MaxHeaderBytes+total {
		return nil, bad(WeightsFile, "%d bytes, more than the %d its model can take", len(weights), 8+MaxHeaderBytes+total)
	}
	params, err := decodeWeights(WeightsFile, meta, weights)
	if err != nil {
		return nil, err
	}
	return &Model{Meta: *meta, Params: params}, nil
}

// ParseMeta parses and checks model.json's bytes (path names it in errors).
func ParseMeta(path string, b []byte) (*Meta, error) {
	if len(b) > MaxMetaBytes {
		return nil, bad(path, "%d bytes, more than %d", len(b), MaxMetaBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Meta
	if err := dec.Decode(&m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, bad(path, "JSON syntax error at byte %d", se.Offset)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, bad(path, "JSON ends early (%d bytes)", len(b))
		}
		return nil, bad(path, "%v", err)
	}
	if dec.More() {
		return nil, bad(path, "data after the JSON object at byte %d", dec.InputOffset())
	}
	if err := m.check(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodeWeights checks weights (model.safetensors' bytes) against meta
// and returns the parameters in Strata's names and layout.
func decodeWeights(path string, meta *Meta, weights []byte) ([]nn.NamedTensor, error) {
	sum := sha256.Sum256(weights)
	if got := hex.EncodeToString(sum[:]); got != meta.WeightsSHA256 {
		return nil, bad(path, "SHA-256 %s, %s records %s: the file is damaged or belongs to another model", got[:16]+"...", MetaFile, meta.WeightsSHA256[:16]+"...")
	}
	if len(weights) >= 8 {
		if n := binary.LittleEndian.Uint64(weights); n > MaxHeaderBytes {
			return nil, bad(path, "header of %d bytes, more than %d", n, MaxHeaderBytes)
		}
	}
	st, err := safetensors.Deserialize(weights)
	if err != nil {
		return nil, bad(path, "not a safetensors file: %v", err)
	}
	specs, _ := meta.specs()
	if st.Len() != len(specs) {
		return nil, bad(path, "%d tensors, a %d-layer %s has %d", st.Len(), meta.Layers, meta.Architecture, len(specs))
	}
	out := make([]nn.NamedTensor, 0, len(specs))
	for _, s := range specs {
		tv, ok := st.Tensor(s.Name)
		if !ok {
			return nil, bad(path, "tensor %s is missing", s.Name)
		}
		if tv.DType() != safetensors.F32 {
			return nil, bad(path, "tensor %s has dtype %s, want F32", s.Name, tv.DType())
		}
		if len(tv.Shape()) != len(s.Shape) {
			return nil, bad(path, "tensor %s has shape %v, want %v", s.Name, tv.Shape(), s.Shape)
		}
		for i, d := range tv.Shape() {
			if d != uint64(s.Shape[i]) {
				return nil, bad(path, "tensor %s has shape %v, want %v", s.Name, tv.Shape(), s.Shape)
			}
		}
		raw := tv.Data()
		if len(raw) != 4*s.rows*s.cols {
			return nil, bad(path, "tensor %s has %d bytes, want %d", s.Name, len(raw), 4*s.rows*s.cols)
		}
		data := make([]float32, s.rows*s.cols)
		for i := range data {
			v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, bad(path, "tensor %s: value %d is %v", s.Name, i, v)
			}
			data[i] = v
		}
		if s.Layout == "transposed" { // stored [cols, rows]: back to [rows, cols]
			data = transpose(data, s.cols, s.rows)
		}
		out = append(out, nn.NamedTensor{Name: s.Param, Rows: s.rows, Cols: s.cols, Data: data})
	}
	return out, nil
}

// transpose returns the cols x rows transpose of the rows x cols matrix a.
func transpose(a []float32, rows, cols int) []float32 {
	out := make([]float32, len(a))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = a[i*cols+j]
		}
	}
	return out
}

// readBounded reads path, a regular file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	// Stat before opening: opening a FIFO would block.
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, bad(path, "missing (not a saved model? 'strata train --save DIR' writes %s and %s)", MetaFile, WeightsFile)
		}
		return nil, &FormatError{Path: path, Msg: err.Error()}
	}
	if !st.Mode().IsRegular() {
		return nil, bad(path, "not a regular file (%s)", st.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &FormatError{Path: path, Msg: err.Error()}
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, bad(path, "%d bytes, more than the %d its model can take", st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &FormatError{Path: path, Msg: err.Error()}
	}
	if int64(len(b)) > limit {
		return nil, bad(path, "more than %d bytes", limit)
	}
	return b, nil
}
