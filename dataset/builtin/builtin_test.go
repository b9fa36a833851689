package builtin

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/testkit"
)

func TestCoraCounts(t *testing.T) {
	if got := Names(); !reflect.DeepEqual(got, []string{"cora"}) {
		t.Fatalf("Names() = %v", got)
	}
	d, err := Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "cora" || d.NumNodes() != 2708 || d.Graph.NumEdges() != 10556 || d.FeatDim != 1433 ||
		d.NumClasses != 7 || d.Directed || len(d.Train) != 140 || len(d.Val) != 500 || len(d.Test) != 1000 {
		t.Fatalf("cora: name=%q n=%d e=%d f=%d c=%d directed=%v split=%d/%d/%d", d.Name, d.NumNodes(),
			d.Graph.NumEdges(), d.FeatDim, d.NumClasses, d.Directed, len(d.Train), len(d.Val), len(d.Test))
	}
	// Facts from meta.json: 49,216 nonzero features, 20 training nodes per
	// class, train = ids 0..139, val = 140..639.
	nnz := 0
	for _, v := range d.Features {
		if v != 0 {
			nnz++
		}
	}
	perClass := make([]int, 7)
	for _, v := range d.Train {
		perClass[d.Labels[v]]++
	}
	if nnz != 49216 || !reflect.DeepEqual(perClass, []int{20, 20, 20, 20, 20, 20, 20}) ||
		d.Train[0] != 0 || d.Train[139] != 139 || d.Val[0] != 140 || d.Val[499] != 639 {
		t.Fatalf("nnz=%d perClass=%v", nnz, perClass)
	}
	// Each Load returns an independent, writable copy.
	d.Features[0] = 42
	d2, _ := Load("cora")
	if d2.Features[0] == 42 {
		t.Fatal("Load returned shared memory")
	}
	if _, err := Load("nope"); err == nil {
		t.Fatal("unknown name accepted")
	}
}

func TestCoraMatchesShared(t *testing.T) {
	want, err := importer.LoadShared(testkit.Dataset(t, "cora"), importer.Options{Name: "cora", Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	// slices.Equal rather than reflect.DeepEqual: the latter is very slow
	// on 3.9M floats under -race.
	same := got.Name == want.Name && got.Directed == want.Directed && got.FeatDim == want.FeatDim &&
		got.NumClasses == want.NumClasses && got.Graph.NumRows == want.Graph.NumRows &&
		got.Graph.NumCols == want.Graph.NumCols && got.Graph.Weights == nil && want.Graph.Weights == nil &&
		slices.Equal(got.Graph.Indptr, want.Graph.Indptr) && slices.Equal(got.Graph.Indices, want.Graph.Indices) &&
		slices.Equal(got.Features, want.Features) && slices.Equal(got.Labels, want.Labels) &&
		slices.Equal(got.Train, want.Train) && slices.Equal(got.Val, want.Val) && slices.Equal(got.Test, want.Test)
	if !same {
		t.Fatal("built-in cora differs from the shared dataset; run go generate ./dataset/builtin")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	ds := []*dataset.Dataset{
		{Name: "dense", Directed: true, Graph: &graph.CSR{NumRows: 3, NumCols: 3, Indptr: []int64{0, 2, 2, 3}, Indices: []int32{0, 2, 1}},
			FeatDim: 2, Features: []float32{0.5, -1, 3, 0, 1e-8, 2}, NumClasses: 3, Labels: []int32{2, -1, 0},
			Train: []int32{0}, Val: []int32{}, Test: []int32{1, 2}},
		{Name: "", Graph: &graph.CSR{NumRows: 0, NumCols: 0, Indptr: []int64{0}, Indices: []int32{}}},
		{Name: "structure", Directed: true, Graph: &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 1}, Indices: []int32{1}}},
	}
	for _, d := range ds {
		b, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("%s: got %+v want %+v", d.Name, got, d)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	orig := &dataset.Dataset{Name: "x", Graph: &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 2}, Indices: []int32{1, 0}}}
	good, err := Encode(orig)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a bit of the gzip stream: gzip's CRC or ours must object, unless
	// the bit was deflate padding and the data decode unchanged.
	for i := 10; i < len(good)-8; i++ {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		if got, err := Decode(b); err == nil {
			if !reflect.DeepEqual(got, orig) {
				t.Fatalf("flip at %d accepted with different data", i)
			}
		} else if !errors.Is(err, dataset.ErrCorruption) {
			t.Fatalf("flip at %d: %v does not wrap ErrCorruption", i, err)
		}
	}
	if _, err := Decode(good[:len(good)/2]); err == nil {
		t.Fatal("truncated asset accepted")
	}
	// Payload-level errors (no CRC in the way).
	for _, c := range []struct {
		name string
		p    []byte
	}{
		{"magic", []byte("XXXX\x01")},
		{"version", []byte("SBDS\x07")},
		{"huge node count", append([]byte("SBDS\x01\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0x07, 0, 0, 0)},
		{"id out of range", []byte("SBDS\x01\x00\x00\x02\x02\x00\x00\x01\x05\x01\x00\x00\x00\x00\x00")},
		{"trailing", []byte("SBDS\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09")},
	} {
		if _, err := decodePayload(c.p); err == nil || !errors.Is(err, dataset.ErrCorruption) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
