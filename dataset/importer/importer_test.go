package importer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

func checkCSR(t *testing.T, g *graph.CSR, n int64, indptr []int64, indices []int32) {
	t.Helper()
	if g.NumRows != n || g.NumCols != n || !reflect.DeepEqual(g.Indptr, indptr) || !reflect.DeepEqual(g.Indices, indices) {
		t.Fatalf("graph: n=%d indptr=%v indices=%v; want n=%d indptr=%v indices=%v", g.NumRows, g.Indptr, g.Indices, n, indptr, indices)
	}
}

// wantErr checks err is a corruption error mentioning every substring.
func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", subs)
	}
	if !errors.Is(err, dataset.ErrCorruption) {
		t.Errorf("error does not wrap ErrCorruption: %v", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestShared(t *testing.T) {
	dir := sharedFixture(t)
	d, err := LoadShared(dir, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCSR(t, d.Graph, 4, []int64{0, 1, 3, 5, 6}, []int32{1, 0, 2, 1, 3, 2})
	if d.Name != "mini" || d.Directed || d.FeatDim != 2 || d.NumClasses != 2 ||
		!reflect.DeepEqual(d.Features, []float32{1, 0, 0, 1, 1, 1, 0, 0}) ||
		!reflect.DeepEqual(d.Labels, []int32{0, 1, 1, -1}) ||
		!reflect.DeepEqual(d.Train, []int32{0, 1}) || !reflect.DeepEqual(d.Val, []int32{2}) || !reflect.DeepEqual(d.Test, []int32{}) {
		t.Fatalf("dataset %+v", d)
	}
	d1, err := LoadShared(dir, Options{Quiet: true, Split: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d1.Train, []int32{2}) || !reflect.DeepEqual(d1.Val, []int32{0}) || !reflect.DeepEqual(d1.Test, []int32{1}) {
		t.Fatalf("split 1: %v %v %v", d1.Train, d1.Val, d1.Test)
	}
	if _, err := LoadShared(dir, Options{Quiet: true, Split: 2}); err == nil || !strings.Contains(err.Error(), "no split 2") {
		t.Fatalf("split 2: %v", err)
	}
}

func TestSharedCorrupt(t *testing.T) {
	t.Run("sha256", func(t *testing.T) {
		dir := sharedFixture(t)
		writeFile(t, dir, "labels.bin.gz", le([]int32{0, 1, 0, -1}))
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "labels.bin.gz", "sha256")
	})
	t.Run("short", func(t *testing.T) {
		dir := sharedFixture(t)
		writeFile(t, dir, "labels.bin.gz", le([]int32{0, 1, 0}))
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "labels.bin.gz: at byte 12", "ends after 12 bytes")
	})
	t.Run("long", func(t *testing.T) {
		dir := sharedFixture(t)
		writeFile(t, dir, "labels.bin.gz", le([]int32{0, 1, 0, 1, 1}))
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "labels.bin.gz: at byte 16", "longer")
	})
	t.Run("edge out of range", func(t *testing.T) {
		dir := sharedFixture(t)
		// Keep meta.json's sha256 consistent so the range check is reached.
		edges := le([]int32{0, 1, 1, 0, 1, 2, 2, 9, 2, 3, 3, 2})
		writeFile(t, dir, "edges.bin.gz", edges)
		rehash(t, dir, "edges.bin", edges)
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "edges.bin.gz: at byte 28", "destination node 9 of edge 3")
	})
	t.Run("declared size lies", func(t *testing.T) {
		dir := sharedFixture(t)
		p := filepath.Join(dir, "meta.json")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(b), `"num_edges":6`, `"num_edges":600000000000`, 1)), 0o644)
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "edges.bin.gz", "declares 48 bytes")
	})
	t.Run("declared node count beyond the files", func(t *testing.T) {
		dir := sharedFixture(t)
		p := filepath.Join(dir, "meta.json")
		b, _ := os.ReadFile(p)
		s := strings.Replace(string(b), `"num_nodes":4`, `"num_nodes":400000000`, 1)
		os.WriteFile(p, []byte(s), 0o644)
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "features.bin.gz", "declares 32 bytes, counts imply 3200000000")
	})
	t.Run("declared bytes beyond the file", func(t *testing.T) {
		dir := sharedFixture(t)
		editMeta(t, dir, func(m map[string]any) {
			m["num_nodes"] = 400000000
			m["files"].(map[string]any)["labels.bin"].(map[string]any)["bytes"] = 1600000000
			m["feat_dim"] = 0
			delete(m["files"].(map[string]any), "features.bin")
		})
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "labels.bin.gz", "num_nodes 400000000 needs 1600000000 bytes")
	})
	t.Run("not gzip", func(t *testing.T) {
		dir := sharedFixture(t)
		os.WriteFile(filepath.Join(dir, "val.idx.gz"), []byte("plain"), 0o644)
		_, err := LoadShared(dir, Options{Quiet: true})
		wantErr(t, err, "val.idx.gz", "not a gzip file")
	})
}

func rehash(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, "meta.json")
	b, _ := os.ReadFile(p)
	m, err := readSharedMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := m.Files[name].SHA256
	writeFile(t, dir, "meta.json", []byte(strings.Replace(string(b), old, sha256hex(data), 1)))
}

func TestOGB(t *testing.T) {
	for _, layout := range []struct {
		name, raw, ext string
	}{{"raw-gz", "raw/", ".gz"}, {"flat-plain", "", ""}} {
		t.Run(layout.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ogbn-mini")
			w := func(name, s string) { writeFile(t, dir, name+layout.ext, []byte(s)) }
			w(layout.raw+"edge.csv", "0,1\n1,2\r\n2,0\n0,1\n3,3\n")
			w(layout.raw+"num-node-list.csv", "4\n")
			w(layout.raw+"node-feat.csv", "0.5,1\n-2,3e-1\n0,0\n1.25,-0\n")
			w(layout.raw+"node-label.csv", "1\n0\nnan\n2.0\n")
			w("split/time/train.csv", "3\n0\n")
			w("split/time/valid.csv", "1\n")
			w("split/time/test.csv", "2\n")
			if k, err := Detect(dir); err != nil || k != OGB {
				t.Fatalf("Detect = %v, %v", k, err)
			}
			d, err := LoadOGB(dir, Options{Quiet: true})
			if err != nil {
				t.Fatal(err)
			}
			// Duplicate 0->1 coalesced; directed.
			checkCSR(t, d.Graph, 4, []int64{0, 1, 2, 3, 4}, []int32{1, 2, 0, 3})
			if !d.Directed || d.FeatDim != 2 || d.NumClasses != 3 || d.Name != "ogbn-mini" ||
				!reflect.DeepEqual(d.Features, []float32{0.5, 1, -2, 0.3, 0, 0, 1.25, 0}) ||
				!reflect.DeepEqual(d.Labels, []int32{1, 0, -1, 2}) ||
				!reflect.DeepEqual(d.Train, []int32{0, 3}) || !reflect.DeepEqual(d.Val, []int32{1}) || !reflect.DeepEqual(d.Test, []int32{2}) {
				t.Fatalf("dataset %+v", d)
			}
			s, err := LoadOGB(dir, Options{Quiet: true, Symmetrize: true})
			if err != nil {
				t.Fatal(err)
			}
			checkCSR(t, s.Graph, 4, []int64{0, 2, 4, 6, 7}, []int32{1, 2, 0, 2, 0, 1, 3})
			if s.Directed {
				t.Fatal("symmetrized graph marked directed")
			}
		})
	}
}

func TestOGBErrors(t *testing.T) {
	base := map[string]string{
		"raw/edge.csv":          "0,1\n1,2\n",
		"raw/num-node-list.csv": "3\n",
		"raw/node-feat.csv":     "1,2\n3,4\n5,6\n",
		"raw/node-label.csv":    "0\n1\n0\n",
	}
	cases := []struct {
		name, file, content string
		want                []string
	}{
		{"bad edge line", "raw/edge.csv", "0,1\n1;2\n", []string{"edge.csv.gz:2", "want \"src,dst\""}},
		{"edge id out of range", "raw/edge.csv", "0,1\n\n1,3\n", []string{"edge.csv.gz:2"}},
		{"edge id out of range 2", "raw/edge.csv", "0,1\n1,3\n", []string{"edge.csv.gz:2", "out of range [0, 3)"}},
		{"ragged features", "raw/node-feat.csv", "1,2\n3\n5,6\n", []string{"node-feat.csv.gz:2", "has 1 fields, earlier rows have 2"}},
		{"bad float", "raw/node-feat.csv", "1,2\n3,x\n5,6\n", []string{"node-feat.csv.gz:2", "field 2", `"x"`}},
		{"nan feature", "raw/node-feat.csv", "1,2\n3,nan\n5,6\n", []string{"node-feat.csv.gz:2"}},
		{"trailing comma", "raw/node-feat.csv", "1,2,\n", []string{"node-feat.csv.gz:1", "empty"}},
		{"row count", "raw/node-feat.csv", "1,2\n3,4\n", []string{"node-feat.csv.gz", "has 2 rows, num-node-list says 3"}},
		{"multi-label", "raw/node-label.csv", "0,1\n1,0\n0,0\n", []string{"node-label.csv.gz:1", "multi-label"}},
		{"bad label", "raw/node-label.csv", "0\n1.5\n0\n", []string{"node-label.csv.gz:2", "bad label"}},
		{"two graphs", "raw/num-node-list.csv", "3\n4\n", []string{"num-node-list.csv.gz:2", "several graphs"}},
		{"split dup", "split/a/train.csv", "0\n0\n", []string{"train.csv.gz", "listed twice"}},
		{"split range", "split/a/train.csv", "0\n7\n", []string{"train.csv.gz:2", "bad node ID"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"split/a/train.csv": "0\n", "split/a/valid.csv": "1\n", "split/a/test.csv": "2\n"}
			for k, v := range base {
				files[k] = v
			}
			files[c.file] = c.content
			for k, v := range files {
				writeFile(t, dir, k+".gz", []byte(v))
			}
			_, err := LoadOGB(dir, Options{Quiet: true})
			wantErr(t, err, c.want...)
		})
	}
	t.Run("lying node count without per-node files", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "edge.csv", []byte("0,1\n"))
		writeFile(t, dir, "num-node-list.csv", []byte("2000000000\n"))
		_, err := LoadOGB(dir, Options{Quiet: true})
		wantErr(t, err, "refusing")
	})
}

func TestSNAP(t *testing.T) {
	text := "# Directed graph: test\n# FromNodeId\tToNodeId\n0\t5\n5 0\n\n  2   5  \n% matrix-market style comment\n5\t2\n0\t5\n"
	for _, name := range []string{"g.txt", "g.txt.gz"} {
		p := writeFile(t, t.TempDir(), name, []byte(text))
		d, err := LoadSNAP(p, Options{Quiet: true})
		if err != nil {
			t.Fatal(err)
		}
		checkCSR(t, d.Graph, 6, []int64{0, 1, 1, 2, 2, 2, 4}, []int32{5, 5, 0, 2})
		if d.Name != "g" || !d.Directed || d.Features != nil || d.Labels != nil {
			t.Fatalf("%+v", d)
		}
		r, err := LoadSNAP(p, Options{Quiet: true, RemapIDs: true, Symmetrize: true})
		if err != nil {
			t.Fatal(err)
		}
		// IDs 0, 2, 5 -> 0, 1, 2.
		checkCSR(t, r.Graph, 3, []int64{0, 1, 2, 4}, []int32{2, 2, 0, 1})
		if r.Directed {
			t.Fatal("symmetrized graph marked directed")
		}
	}
	sparse := writeFile(t, t.TempDir(), "s.txt", []byte("10000000000 3\n3 10000000000\n"))
	if _, err := LoadSNAP(sparse, Options{Quiet: true}); err == nil || !strings.Contains(err.Error(), "s.txt:1") {
		t.Fatalf("sparse without remap: %v", err)
	}
	r, err := LoadSNAP(sparse, Options{Quiet: true, RemapIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCSR(t, r.Graph, 2, []int64{0, 1, 2}, []int32{1, 0})
	if _, err := LoadSNAP(writeFile(t, t.TempDir(), "n.txt", []byte("0 1\n")), Options{Quiet: true, NumNodes: 5}); err != nil {
		t.Fatal(err)
	}
	// A few bytes must not imply a 16 GB indptr.
	_, err = LoadSNAP(writeFile(t, t.TempDir(), "big.txt", []byte("0 2000000000\n")), Options{Quiet: true})
	wantErr(t, err, "big.txt", "too sparse")
	for _, c := range []struct{ text, want string }{
		{"0 1\n1\n", "e.txt:2"},
		{"0 1\n# c\n1 x\n", "e.txt:3"},
		{"0 -1\n", "negative"},
	} {
		_, err := LoadSNAP(writeFile(t, t.TempDir(), "e.txt", []byte(c.text)), Options{Quiet: true})
		wantErr(t, err, c.want)
	}
}

func TestTruncatedGzip(t *testing.T) {
	var text strings.Builder
	for i := 0; i < 200000; i++ {
		text.WriteString("1 2\n3 4\n")
	}
	p := writeFile(t, t.TempDir(), "g.txt.gz", []byte(text.String()))
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)/2], 0o644)
	_, err := LoadSNAP(p, Options{Quiet: true})
	if err == nil || !strings.Contains(err.Error(), "g.txt.gz:") || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Fatalf("truncated gzip: %v", err)
	}
}

func TestNPY(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "np")
	// [2, E] int64 edges, float64 features, int64 labels [N,1], id splits
	// and a bool test mask.
	writeFile(t, dir, "edge_index.npy", npyBytes("<i8", []int64{2, 3}, le([]int64{0, 1, 2, 1, 2, 0})))
	writeFile(t, dir, "features.npy", npyBytes("<f8", []int64{3, 2}, le([]float64{1, 2, 3, 4, 5, 6.5})))
	writeFile(t, dir, "labels.npy", npyBytes("<i8", []int64{3, 1}, le([]int64{1, -1, 0})))
	writeFile(t, dir, "train_idx.npy", npyBytes("<i4", []int64{2}, le([]int32{2, 0})))
	writeFile(t, dir, "test_mask.npy", npyBytes("|b1", []int64{3}, []byte{0, 1, 0}))
	if k, err := Detect(dir); err != nil || k != NPY {
		t.Fatalf("Detect = %v, %v", k, err)
	}
	d, err := LoadNPY(dir, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCSR(t, d.Graph, 3, []int64{0, 1, 2, 3}, []int32{1, 2, 0})
	if d.FeatDim != 2 || d.NumClasses != 2 || !d.Directed ||
		!reflect.DeepEqual(d.Features, []float32{1, 2, 3, 4, 5, 6.5}) ||
		!reflect.DeepEqual(d.Labels, []int32{1, -1, 0}) ||
		!reflect.DeepEqual(d.Train, []int32{0, 2}) || d.Val != nil || !reflect.DeepEqual(d.Test, []int32{1}) {
		t.Fatalf("%+v", d)
	}
	// [E, 2] int32 edges, float32 features, structure inferred.
	dir2 := t.TempDir()
	writeFile(t, dir2, "edges.npy", npyBytes("<i4", []int64{3, 2}, le([]int32{0, 1, 1, 2, 2, 0})))
	writeFile(t, dir2, "x.npy", npyBytes("<f4", []int64{4, 1}, le([]float32{1, 2, 3, 4})))
	d2, err := LoadNPY(dir2, Options{Quiet: true, Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCSR(t, d2.Graph, 4, []int64{0, 2, 4, 6, 6}, []int32{1, 2, 0, 2, 0, 1})
}

func TestNPYErrors(t *testing.T) {
	edges := npyBytes("<i4", []int64{2, 2}, le([]int32{0, 1, 1, 0}))
	cases := []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"id out of range", map[string][]byte{
			"edge_index.npy": npyBytes("<i8", []int64{2, 3}, le([]int64{0, 1, 2, 1, 7, 0})),
			"features.npy":   npyBytes("<f4", []int64{3, 1}, le([]float32{1, 2, 3})),
		}, []string{"edge_index.npy: at byte 160", "value 7 at element 4 out of range [0, 3)"}},
		{"truncated payload", map[string][]byte{
			"edge_index.npy": edges[:len(edges)-2],
		}, []string{"edge_index.npy", "edge_index.npy: at byte 128", "file has 142 bytes", "implies 144"}},
		{"huge shape", map[string][]byte{
			"edge_index.npy": npyBytes("<i4", []int64{2, 1 << 40}, le([]int32{0, 1, 1, 0})),
		}, []string{"edge_index.npy", "implies 8796093022336"}},
		{"overflowing shape", map[string][]byte{
			"edge_index.npy": npyBytes("<i4", []int64{1 << 40, 1 << 40}, nil),
		}, []string{"edge_index.npy", "overflows"}},
		{"big endian", map[string][]byte{
			"edge_index.npy": npyBytes(">i4", []int64{2, 2}, le([]int32{0, 1, 1, 0})),
		}, []string{"unsupported dtype \">i4\""}},
		{"too sparse", map[string][]byte{
			"edge_index.npy": npyBytes("<i4", []int64{2, 1}, le([]int32{0, 2000000000})),
		}, []string{"edge_index.npy", "too sparse"}},
		{"bad magic", map[string][]byte{
			"edge_index.npy": []byte("PK\x03\x04 this is a zip"),
		}, []string{"edge_index.npy: at byte 0", "bad magic"}},
		{"bad shape for edges", map[string][]byte{
			"edge_index.npy": npyBytes("<i4", []int64{3, 3}, make([]byte, 36)),
		}, []string{"[2, E] or [E, 2]"}},
		{"nan feature", map[string][]byte{
			"edge_index.npy": edges,
			"features.npy":   npyBytes("<f4", []int64{2, 1}, le([]float32{1, float32(nan())})),
		}, []string{"features.npy: at byte 132", "non-finite"}},
		{"bad mask", map[string][]byte{
			"edge_index.npy": edges,
			"labels.npy":     npyBytes("<i4", []int64{2}, le([]int32{0, 1})),
			"val_mask.npy":   npyBytes("|u1", []int64{2}, []byte{0, 2}),
		}, []string{"val_mask.npy: at byte 129", "not 0 or 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for k, v := range c.files {
				writeFile(t, dir, k, v)
			}
			_, err := LoadNPY(dir, Options{Quiet: true})
			wantErr(t, err, c.want...)
		})
	}
}

func TestImportRoundTrip(t *testing.T) {
	src := sharedFixture(t)
	dst := filepath.Join(t.TempDir(), "out")
	if err := Import("", src, dst, Options{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	d, err := dataset.Open(dst, dataset.OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkCSR(t, d.Graph, 4, []int64{0, 1, 3, 5, 6}, []int32{1, 0, 2, 1, 3, 2})
	if !reflect.DeepEqual(d.Labels, []int32{0, 1, 1, -1}) {
		t.Fatal(d.Labels)
	}
	if _, err := Load("bogus", src, Options{}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if _, err := Detect(t.TempDir()); err == nil {
		t.Fatal("empty dir detected as something")
	}
}
