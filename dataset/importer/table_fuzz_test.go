package importer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer/tabletest"
	"github.com/strata-gnn/strata/graph"
)

// small is a 5-node dataset with weights, features, labels and splits.
func small() *dataset.Dataset {
	g := &graph.CSR{NumRows: 5, NumCols: 5, Indptr: []int64{0, 2, 3, 4, 5, 5}, Indices: []int32{1, 2, 0, 4, 3}, Weights: []float32{1, 0.5, 2, 0, 3}}
	return &dataset.Dataset{Name: "small", Graph: g, Directed: true, FeatDim: 2,
		Features: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, NumClasses: 2, Labels: []int32{0, 1, -1, 1, 0},
		Train: []int32{0, 1}, Val: []int32{3}, Test: []int32{4}}
}

// fuzzLimits keep one fuzz input from costing seconds or much memory.
func fuzzOpts(edges, nodes string) TableOptions {
	return TableOptions{Options: Options{Quiet: true, MaxBytes: 4 << 20, limitNodes: 1 << 12}, Edges: edges, Nodes: nodes}
}

func checkLoaded(t *testing.T, res *TableImport, err error) {
	t.Helper()
	if err != nil {
		return
	}
	if err := dataset.Validate(res.Dataset); err != nil {
		t.Fatalf("accepted an invalid dataset: %v", err)
	}
	if res.NodeIDs != nil && int64(res.NodeIDs.Len()) != res.Dataset.NumNodes() {
		t.Fatalf("%d node IDs for %d nodes", res.NodeIDs.Len(), res.Dataset.NumNodes())
	}
}

// FuzzCSVTables feeds arbitrary bytes as the edge and node CSV tables:
// the import fails with an error or yields a valid dataset, never panics.
func FuzzCSVTables(f *testing.F) {
	f.Add([]byte("src,dst,weight\n0,1,0.5\n1,2,1\n"), []byte("id,feat,label,split\n0,\"[1,2]\",0,train\n1,\"[3,4]\",1,val\n2,\"[5,6]\",,test\n"))
	f.Add([]byte("source;target\na;b\n\"c;d\";a\n"), []byte{})
	f.Add([]byte("src,dst,etype\n1,2,x\n2,1,y\n"), []byte("id,ntype,train_mask\n1,a,true\n2,a,0\n"))
	f.Add([]byte("\xef\xbb\xbfsrc,dst\n-5,7\n"), []byte("id,label\n-5,cat\n7,dog\n"))
	f.Add([]byte("u,v\n0,0\n\n"), []byte("nid,x_0,x_1,y\n0,1e30,2,3\n"))
	// One directory per fuzz process (inputs run one at a time there): a
	// temporary directory per input spends most of the time unlinking.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, edges, nodes []byte) {
		if len(edges)+len(nodes) > 1<<16 {
			return
		}
		e := filepath.Join(dir, "e.csv")
		os.WriteFile(e, edges, 0o644)
		n := ""
		os.Remove(filepath.Join(dir, "n.csv"))
		if len(nodes) > 0 {
			n = filepath.Join(dir, "n.csv")
			os.WriteFile(n, nodes, 0o644)
		}
		res, err := LoadTables(fuzzOpts(e, n))
		checkLoaded(t, res, err)
	})
}

// parquetSeeds returns small Parquet tables written by tabletest.
func parquetSeeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, o := range []tabletest.Options{{ListFeatures: true}, {ID: func(v int) string { return string(rune('a' + v)) }}} {
		dir := f.TempDir()
		e, n, err := tabletest.WriteParquet(dir, small(), o)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range []string{e, n} {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

// FuzzParquetTable feeds arbitrary bytes as a Parquet edge or node table:
// the import fails with an error or yields a valid dataset, never panics
// or allocates what the bytes merely declare.
func FuzzParquetTable(f *testing.F) {
	for i, b := range parquetSeeds(f) {
		f.Add(b, i%2 == 1)
	}
	for _, name := range []string{"alltypes_plain.snappy.parquet", "list_columns.parquet"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "parquet", name)); err == nil {
			f.Add(b, true)
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, asNodes bool) {
		if len(b) > 1<<16 {
			return
		}
		p := filepath.Join(dir, "t.parquet")
		os.WriteFile(p, b, 0o644)
		o := fuzzOpts(p, "")
		if asNodes {
			o.Edges = filepath.Join(dir, "e.csv")
			os.WriteFile(o.Edges, []byte("src,dst\n0,0\n"), 0o644)
			o.Nodes, o.ID = p, "-"
		}
		res, err := LoadTables(o)
		checkLoaded(t, res, err)
	})
}

// thrift builds Thrift compact-protocol bytes for the hardening tests.
type thrift struct{ b []byte }

func (w *thrift) field(id, typ byte) { w.b = append(w.b, id<<4|typ) } // delta id
func (w *thrift) i32(id byte, v int64) {
	w.field(id, 5)
	w.b = binary.AppendUvarint(w.b, uint64(v<<1^v>>63))
}
func (w *thrift) stop() { w.b = append(w.b, 0) }

// TestParquetSizesCheckedBeforeAllocating: a footer length, a Thrift list
// length, a page size, a decompressed size or a value count that the
// bytes do not back is refused before the library allocates it.
func TestParquetSizesCheckedBeforeAllocating(t *testing.T) {
	dir := t.TempDir()
	files := 0
	file := func(footer []byte, footerLen uint32) string {
		files++
		b := []byte("PAR1")
		b = append(b, footer...)
		b = binary.LittleEndian.AppendUint32(b, footerLen)
		b = append(b, "PAR1"...)
		p := filepath.Join(dir, fmt.Sprintf("x%d.parquet", files))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	list := func(n uint64) []byte { // field 2 (schema) of FileMetaData: a list of structs
		return binary.AppendUvarint([]byte{0x19, 0xfc}, n)
	}
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"footer length", file([]byte("xxxx"), 0xfffffff0), "footer length 4294967280 does not fit"},
		{"list length", file(list(1<<31-1), uint32(len(list(1<<31-1)))), "list length 2147483647 exceeds"},
		{"string length", file([]byte{0x18, 0xff, 0xff, 0xff, 0xff, 0x07}, 6), "string length"},
		{"deep nesting", file(bytes.Repeat([]byte{0x1c}, 100), 100), "nesting deeper"},
		{"encrypted", func() string {
			p := file(nil, 0)
			b, _ := os.ReadFile(p)
			copy(b[len(b)-4:], "PARE")
			os.WriteFile(p, b, 0o644)
			return p
		}(), "encrypted"},
		{"no magic", func() string {
			p := filepath.Join(dir, "y.parquet")
			os.WriteFile(p, []byte("PAR1 not really"), 0o644)
			return p
		}(), "no PAR1 magic at the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			_, err = preflightParquet(tc.path, f, fi.Size())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	page := func(typ, unc, comp, values int64, body []byte) []byte {
		var w thrift
		w.i32(1, typ)
		w.i32(1, unc)
		w.i32(1, comp)
		w.field(2, 12) // field 5: data_page_header
		w.i32(1, values)
		w.i32(1, 0) // encoding
		w.i32(1, 0)
		w.i32(1, 0)
		w.stop()
		w.stop()
		return append(w.b, body...)
	}
	for _, tc := range []struct {
		name  string
		chunk []byte
		codec int32
		want  string
	}{
		{"page past chunk", page(0, 10, 1<<30, 1, make([]byte, 10)), codecNone, "does not fit its column chunk"},
		{"huge page", page(0, 1<<30, 4, 1, make([]byte, 4)), codecNone, "uncompressed bytes"},
		{"too many values", page(0, 4, 4, 1<<31-1, make([]byte, 4)), codecNone, "values"},
		{"snappy bomb", page(0, 16, 6, 1, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}), codecSnappy, "more than the 16 stated"},
		{"lz4 corrupt", page(0, 16, 4, 1, []byte{0xf0, 1, 2, 3}), codecLZ4Raw, "compressed page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.chunk)
			_, err := checkChunk("x.parquet", r, 0, int64(len(tc.chunk)), tc.codec, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	good := page(0, 4, 4, 1, make([]byte, 4))
	if _, err := checkChunk("x.parquet", bytes.NewReader(good), 0, int64(len(good)), codecNone, 1); err != nil {
		t.Fatalf("a well-formed page: %v", err)
	}
}

// TestParquetDeclaredValuesBounded: a file whose column chunks declare
// more values than the memory allowed is refused before reading pages.
func TestParquetDeclaredValuesBounded(t *testing.T) {
	dir := t.TempDir()
	e, _, err := tabletest.WriteParquet(dir, small(), tabletest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true, MaxBytes: 16}, Edges: e})
	if err == nil || !strings.Contains(err.Error(), "declare 15 values") {
		t.Fatalf("error %v, want the declared value count refused", err)
	}
}

// TestParquetFromOtherWriters reads files written by Impala (snappy, v1
// pages, optional columns), parquet-cpp (three-level lists with nulls)
// and Spark (v2 pages), from apache/parquet-testing (testdata/parquet).
func TestParquetFromOtherWriters(t *testing.T) {
	dir := t.TempDir()
	pq := func(name string) string { return filepath.Join("testdata", "parquet", name) }
	e := writeFile(t, dir, "e.csv", []byte("src,dst\n6,7\n"))
	res, err := LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e, Nodes: pq("alltypes_plain.snappy.parquet"),
		Features: []string{"float_col", "double_col"}, Label: "tinyint_col"})
	if err != nil {
		t.Fatal(err)
	}
	d := res.Dataset
	if d.FeatDim != 2 || d.Features[2] != 1.1 || d.Features[3] != 10.1 || d.Labels[1] != 1 || res.NodeIDs.Ints[1] != 7 || d.Graph.Indices[0] != 1 {
		t.Fatalf("alltypes_plain: features %v labels %v ids %v", d.Features, d.Labels, res.NodeIDs)
	}
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e, Nodes: pq("alltypes_plain.snappy.parquet"), Features: []string{"timestamp_col"}})
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "timestamp_col") {
		t.Fatalf("an int96 column: %v, want *UnsupportedError naming it", err)
	}
	// parquet-cpp lists: row 2 holds a null element.
	e0 := writeFile(t, dir, "e0.csv", []byte("src,dst\n0,1\n"))
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e0, Nodes: pq("list_columns.parquet"), Features: []string{"int64_list"}})
	if err == nil || !strings.Contains(err.Error(), "list_columns.parquet: row 2, column \"int64_list\": null element") {
		t.Fatalf("list with a null element: %v", err)
	}
	// Spark, data page v2: scalar columns read; a list of 3 then null lists is refused by width.
	res, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e0, Nodes: pq("datapage_v2.snappy.parquet"), Features: []string{"c"}, Label: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Dataset; d.NumNodes() != 5 || d.Features[3] != 5 || d.Labels[4] != 5 || d.NumClasses != 6 {
		t.Fatalf("datapage_v2: %d nodes, features %v, labels %v", d.NumNodes(), d.Features, d.Labels)
	}
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e0, Nodes: pq("datapage_v2.snappy.parquet"), Features: []string{"e"}})
	if err == nil || !strings.Contains(err.Error(), "row 2, column \"e\": 0 feature values, earlier rows have 3") {
		t.Fatalf("datapage_v2 lists: %v", err)
	}
}
