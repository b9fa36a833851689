package dataset

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// tiny returns a 5-node undirected dataset with every optional array.
func tiny() *Dataset {
	// edges: 0-1, 0-2, 1-3, 3-4 (both directions)
	g := &graph.CSR{
		NumRows: 5, NumCols: 5,
		Indptr:  []int64{0, 2, 4, 5, 7, 8},
		Indices: []int32{1, 2, 0, 3, 0, 1, 4, 3},
		Weights: []float32{1, 0.5, 1, 2, 0.5, 2, 3, 3},
	}
	return &Dataset{
		Name: "tiny", Graph: g, Directed: false,
		FeatDim: 3, Features: []float32{1, 0, 0, 0, 2, 2, 1, 1, 1, 0, 0, 0, 4, 0, 1},
		NumClasses: 2, Labels: []int32{0, 1, -1, 1, 0},
		Train: []int32{0, 1}, Val: []int32{3}, Test: []int32{2, 4},
	}
}

func writeTiny(t *testing.T) (string, *Dataset) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	d := tiny()
	if err := Write(dir, d, WriteOptions{Quiet: true}); err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func sameDataset(t *testing.T, got, want *Dataset) {
	t.Helper()
	if got.Name != want.Name || got.Directed != want.Directed || got.FeatDim != want.FeatDim || got.NumClasses != want.NumClasses {
		t.Fatalf("header mismatch: got %+v want %+v", got, want)
	}
	if got.Graph.NumRows != want.Graph.NumRows || got.Graph.NumCols != want.Graph.NumCols {
		t.Fatalf("graph size mismatch")
	}
	for _, c := range []struct {
		name string
		a, b any
	}{
		{"indptr", got.Graph.Indptr, want.Graph.Indptr},
		{"indices", got.Graph.Indices, want.Graph.Indices},
		{"weights", got.Graph.Weights, want.Graph.Weights},
		{"features", got.Features, want.Features},
		{"labels", got.Labels, want.Labels},
		{"train", got.Train, want.Train},
		{"val", got.Val, want.Val},
		{"test", got.Test, want.Test},
	} {
		if !reflect.DeepEqual(c.a, c.b) {
			t.Errorf("%s: got %v want %v", c.name, c.a, c.b)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir, want := writeTiny(t)
	for _, opts := range []OpenOptions{{}, {NoMmap: true}, {SkipChecksums: true}} {
		got, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		sameDataset(t, got, want)
		if got.Mapped() == opts.NoMmap {
			t.Errorf("%+v: Mapped() = %v", opts, got.Mapped())
		}
		if err := got.Close(); err != nil {
			t.Fatal(err)
		}
		if err := got.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
	}
	// Arrays are plain little-endian files: check one byte-exactly.
	b, err := os.ReadFile(filepath.Join(dir, "labels.bin"))
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := []byte{0, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0}
	if !reflect.DeepEqual(b, wantBytes) {
		t.Fatalf("labels.bin = %v, want %v", b, wantBytes)
	}
}

func TestRoundTripMinimal(t *testing.T) {
	// Structure only, directed, with an empty row and zero edges in a row.
	d := &Dataset{Name: "m", Directed: true, Graph: &graph.CSR{
		NumRows: 3, NumCols: 3, Indptr: []int64{0, 0, 2, 2}, Indices: []int32{0, 2}}}
	dir := filepath.Join(t.TempDir(), "m")
	if err := Write(dir, d, WriteOptions{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	got, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	sameDataset(t, got, d)
	if got.Features != nil || got.Labels != nil || got.Train != nil || got.Graph.Weights != nil {
		t.Fatal("absent arrays must stay nil")
	}
	// Empty graph.
	e := &Dataset{Graph: &graph.CSR{Indptr: []int64{0}, Indices: []int32{}}}
	dir2 := filepath.Join(t.TempDir(), "e")
	if err := Write(dir2, e, WriteOptions{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	got2, err := Open(dir2, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got2.NumNodes() != 0 || got2.Graph.NumEdges() != 0 {
		t.Fatal("empty graph not empty")
	}
}

func TestWriteRefusesToClobber(t *testing.T) {
	dir, d := writeTiny(t)
	if err := Write(dir, d, WriteOptions{Quiet: true}); err == nil {
		t.Fatal("second Write without Overwrite succeeded")
	}
	d2 := tiny()
	d2.Name = "tiny2"
	if err := Write(dir, d2, WriteOptions{Quiet: true, Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	got, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Name != "tiny2" {
		t.Fatalf("overwrite kept old data: name %q", got.Name)
	}
	// A non-dataset directory is never replaced, even with Overwrite.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "precious.txt"), []byte("x"), 0o644)
	if err := Write(other, d, WriteOptions{Quiet: true, Overwrite: true}); err == nil {
		t.Fatal("Write replaced a non-dataset directory")
	}
	if _, err := os.Stat(filepath.Join(other, "precious.txt")); err != nil {
		t.Fatal(err)
	}
	// No temp dirs left behind.
	ents, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}

func TestWriteRejectsInvalid(t *testing.T) {
	d := tiny()
	d.Graph.Indices[3] = 7
	err := Write(filepath.Join(t.TempDir(), "x"), d, WriteOptions{Quiet: true})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "indices: at byte 12") {
		t.Fatalf("got %v", err)
	}
}

// rewriteManifest edits the manifest and fixes its self-checksum, so tests
// can reach the checks behind it.
func rewriteManifest(t *testing.T, dir string, edit func(*Manifest)) {
	t.Helper()
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if m.ManifestCRC32C, err = manifestCRC(&m); err != nil {
		t.Fatal(err)
	}
	b, _ = json.MarshalIndent(&m, "", "  ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// patch overwrites bytes of an array file at off; with fix it also
// recomputes the checksums so only structural validation can object.
func patch(t *testing.T, dir, name string, off int64, data []byte, fix bool) {
	t.Helper()
	path := filepath.Join(dir, ArrayFile(name))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[off:], data)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if fix {
		rewriteManifest(t, dir, func(m *Manifest) {
			a := m.Array(name)
			a.CRC32C = nil
			for lo := int64(0); lo < int64(len(b)); lo += a.BlockBytes {
				a.CRC32C = append(a.CRC32C, crcHex(crc32c(b[lo:min(lo+a.BlockBytes, int64(len(b)))])))
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	type tc struct {
		name    string
		corrupt func(t *testing.T, dir string)
		opts    OpenOptions
		want    []string // substrings of the error
		version bool     // also wraps ErrUnsupportedVersion
	}
	cases := []tc{
		{name: "truncated", corrupt: func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "indices.bin"), 30)
		}, want: []string{"indices.bin: at byte 30", "truncated"}},
		{name: "trailing", corrupt: func(t *testing.T, dir string) {
			f, _ := os.OpenFile(filepath.Join(dir, "features.bin"), os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{1, 2, 3, 4})
			f.Close()
		}, want: []string{"features.bin: at byte 60", "trailing"}},
		{name: "flipped byte", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrFeatures, 21, []byte{0x7f}, false)
		}, want: []string{"features.bin: at byte 0", "checksum mismatch in block 0"}},
		{name: "bad node id", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrIndices, 20, []byte{5, 0, 0, 0}, true)
		}, want: []string{"indices.bin: at byte 20", "node ID 5 at entry 5 out of range [0, 5)"}},
		{name: "bad node id unchecked", opts: OpenOptions{SkipChecksums: true}, corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrIndices, 8, []byte{0xff, 0xff, 0xff, 0xff}, false)
		}, want: []string{"indices.bin: at byte 8", "node ID -1"}},
		{name: "indptr decreasing", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrIndptr, 16, []byte{1, 0, 0, 0, 0, 0, 0, 0}, true)
		}, want: []string{"indptr.bin: at byte 16", "decreases"}},
		{name: "indptr nonzero start", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrIndptr, 0, []byte{1}, true)
		}, want: []string{"indptr.bin: at byte 0", "want 0"}},
		{name: "label out of range", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrLabels, 12, []byte{2, 0, 0, 0}, true)
		}, want: []string{"labels.bin: at byte 12", "label 2 of node 3"}},
		{name: "split not ascending", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrTest, 4, []byte{2, 0, 0, 0}, true)
		}, want: []string{"test.bin: at byte 4", "strictly ascending"}},
		{name: "nan feature", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrFeatures, 8, []byte{0, 0, 0xc0, 0x7f}, true)
		}, want: []string{"features.bin: at byte 8", "non-finite"}},
		{name: "huge declared length", corrupt: func(t *testing.T, dir string) {
			rewriteManifest(t, dir, func(m *Manifest) {
				const e = 1 << 40
				m.NumEdges = e
				for _, n := range []string{ArrIndices, ArrWeights} {
					a := m.Array(n)
					a.Shape = []int64{e}
					a.Bytes = 4 * e
					a.BlockBytes = 1 << 40
					a.CRC32C = []string{"00000000", "00000000", "00000000", "00000000"}
				}
			})
		}, want: []string{"indices.bin: at byte 32", "truncated: 32 bytes, manifest declares 4398046511104"}},
		{name: "unknown version", corrupt: func(t *testing.T, dir string) {
			rewriteManifest(t, dir, func(m *Manifest) { m.Version = 9 })
		}, want: []string{"unsupported format version 9"}, version: true},
		{name: "bad magic", corrupt: func(t *testing.T, dir string) {
			rewriteManifest(t, dir, func(m *Manifest) { m.Magic = "NOPE" })
		}, want: []string{"bad magic"}},
		{name: "manifest edited by hand", corrupt: func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestFile)
			b, _ := os.ReadFile(path)
			os.WriteFile(path, []byte(strings.Replace(string(b), `"directed": false`, `"directed": true `, 1)), 0o644)
		}, want: []string{"manifest checksum mismatch"}},
		{name: "manifest unknown field", corrupt: func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestFile)
			b, _ := os.ReadFile(path)
			os.WriteFile(path, []byte(strings.Replace(string(b), `{`, `{"extra": 1,`, 1)), 0o644)
		}, want: []string{"unknown field"}},
		{name: "truncated manifest", corrupt: func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, ManifestFile), 100)
		}, want: []string{"manifest.json: at byte 100", "truncated"}},
		{name: "manifest number echo", corrupt: func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestFile)
			b, _ := os.ReadFile(path)
			huge := `"num_nodes": 1` + strings.Repeat("0", 1<<16)
			os.WriteFile(path, []byte(strings.Replace(string(b), `"num_nodes": 5`, huge, 1)), 0o644)
		}, want: []string{"manifest.json: at byte", "num_nodes"}},
		{name: "shape disagrees with counts", corrupt: func(t *testing.T, dir string) {
			rewriteManifest(t, dir, func(m *Manifest) { m.NumNodes = 6 })
		}, want: []string{`array "indptr" has shape [6], want [7]`}},
		{name: "undirected but asymmetric", corrupt: func(t *testing.T, dir string) {
			patch(t, dir, ArrIndices, 0, []byte{4, 0, 0, 0}, true)
		}, want: []string{"marked undirected", "node 1 has out-degree 2 and in-degree 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := writeTiny(t)
			c.corrupt(t, dir)
			d, err := Open(dir, c.opts)
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded on corrupt dataset")
			}
			if !errors.Is(err, ErrCorruption) {
				t.Errorf("error does not wrap ErrCorruption: %v", err)
			}
			if c.version != errors.Is(err, ErrUnsupportedVersion) {
				t.Errorf("ErrUnsupportedVersion match = %v: %v", !c.version, err)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Errorf("not a *FormatError: %T", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if msg := err.Error(); len(msg) > 400 || strings.ContainsAny(msg, "\x1b\n") {
				t.Errorf("error of %d bytes echoes the input: %.200q", len(msg), msg)
			}
		})
	}
}

func TestInfo(t *testing.T) {
	dir, _ := writeTiny(t)
	s, err := Info(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.NumNodes != 5 || s.NumEdges != 8 || s.FeatDim != 3 || s.NumClasses != 2 || s.Directed ||
		!s.Weighted || s.NumTrain != 2 || s.NumVal != 1 || s.NumTest != 2 || s.TotalBytes != 48+32+32+60+20+8+4+8 {
		t.Fatalf("summary %+v", s)
	}
	if !strings.Contains(s.String(), "train 2 / val 1 / test 2") {
		t.Fatalf("String():\n%s", s)
	}
}

func TestRowNormalize(t *testing.T) {
	x := []float32{1, 3, 0, 0, 2, 2}
	got := RowNormalize(x, 2)
	want := []float32{0.25, 0.75, 0, 0, 0.5, 0.5}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if x[0] != 1 {
		t.Fatal("input modified")
	}
	// On a mapped dataset the copy must not touch the mapping.
	dir, _ := writeTiny(t)
	d, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	n := d.WithRowNormalizedFeatures()
	if n.Features[1*3+1] != 0.5 || d.Features[1*3+1] != 2 {
		t.Fatalf("normalized %v original %v", n.Features, d.Features)
	}
	if n.Mapped() {
		t.Fatal("copy claims the mapping")
	}
}

func TestInGraph(t *testing.T) {
	d := tiny()
	if d.InGraph() != d.Graph {
		t.Fatal("undirected InGraph must be Graph itself")
	}
	d = &Dataset{Directed: true, Graph: &graph.CSR{NumRows: 3, NumCols: 3,
		Indptr: []int64{0, 2, 3, 3}, Indices: []int32{1, 2, 2}, Weights: []float32{10, 20, 30}}}
	in := d.InGraph()
	if !reflect.DeepEqual(in.Indptr, []int64{0, 0, 1, 3}) || !reflect.DeepEqual(in.Indices, []int32{0, 0, 1}) ||
		!reflect.DeepEqual(in.Weights, []float32{10, 20, 30}) {
		t.Fatalf("transpose %+v", in)
	}
	d.Graph.Indices[0] = 9
	if g, err := d.InAdjacency(); err == nil || g != nil || d.InGraph() != nil {
		t.Fatal("invalid graph transposed")
	}
}

func TestFirstBadParallel(t *testing.T) {
	// Large inputs take the parallel path; the first bad entry must win.
	ids := make([]int32, 3*parallelMin)
	ids[2*parallelMin+5] = 99
	ids[parallelMin+7] = -3
	err := checkIDs("ix", ids, 10)
	if err == nil || !strings.Contains(err.Error(), "node ID -3 at entry 1048583") {
		t.Fatalf("got %v", err)
	}
	x := make([]float32, 3*parallelMin)
	x[len(x)-1] = float32(math.Inf(1))
	if err := checkFinite("x", x); err == nil || !strings.Contains(err.Error(), "at byte 12582908") {
		t.Fatalf("got %v", err)
	}
}

// TestWriteSidecar: files the Sidecar hook adds land in the dataset
// directory with it (and Open ignores them); a hook that fails, or writes
// a manifest, leaves nothing behind.
func TestWriteSidecar(t *testing.T) {
	d := tiny()
	dir := filepath.Join(t.TempDir(), "ds")
	err := Write(dir, d, WriteOptions{NoSync: true, Sidecar: func(tmp string) error {
		return os.WriteFile(filepath.Join(tmp, "node_ids.csv"), []byte("node,id\n"), 0o644)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "node_ids.csv")); err != nil || string(b) != "node,id\n" {
		t.Fatalf("side file: %v %q", err, b)
	}
	got, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	for _, hook := range []func(string) error{
		func(string) error { return os.ErrPermission },
		func(tmp string) error { return os.WriteFile(filepath.Join(tmp, ManifestFile), []byte("{}"), 0o644) },
	} {
		dir2 := filepath.Join(t.TempDir(), "ds")
		if err := Write(dir2, d, WriteOptions{NoSync: true, Sidecar: hook}); err == nil {
			t.Fatal("a failing or manifest-writing Sidecar was accepted")
		}
		ents, _ := os.ReadDir(filepath.Dir(dir2))
		if len(ents) != 0 {
			t.Fatalf("left behind: %v", ents)
		}
	}
}
