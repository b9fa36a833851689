package importer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/importer/tabletest"
	"github.com/strata-gnn/strata/graph"
)

func cora(t testing.TB) *dataset.Dataset {
	t.Helper()
	d, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sameDataset compares everything but the name: CSR, weights, direction,
// features, labels, splits (and so the fingerprint).
func sameDataset(t *testing.T, got, want *dataset.Dataset) {
	t.Helper()
	g, w := got.Graph, want.Graph
	switch {
	case g.NumRows != w.NumRows || !slices.Equal(g.Indptr, w.Indptr) || !slices.Equal(g.Indices, w.Indices):
		t.Fatalf("CSR differs: %d nodes %d edges, want %d nodes %d edges", g.NumRows, g.NumEdges(), w.NumRows, w.NumEdges())
	case !slices.Equal(g.Weights, w.Weights):
		t.Fatalf("weights differ")
	case got.Directed != want.Directed:
		t.Fatalf("directed %v, want %v", got.Directed, want.Directed)
	case got.FeatDim != want.FeatDim || !slices.Equal(got.Features, want.Features):
		t.Fatalf("features differ (dim %d, want %d)", got.FeatDim, want.FeatDim)
	case got.NumClasses != want.NumClasses || !slices.Equal(got.Labels, want.Labels):
		t.Fatalf("labels differ (%d classes, want %d)", got.NumClasses, want.NumClasses)
	case !slices.Equal(got.Train, want.Train) || !slices.Equal(got.Val, want.Val) || !slices.Equal(got.Test, want.Test):
		t.Fatalf("splits differ: %d/%d/%d, want %d/%d/%d", len(got.Train), len(got.Val), len(got.Test), len(want.Train), len(want.Val), len(want.Test))
	}
	if got.Fingerprint() != want.Fingerprint() {
		t.Fatalf("fingerprint %s, want %s", got.Fingerprint(), want.Fingerprint())
	}
}

// TestCoraTablesRoundTrip: the built-in Cora written as CSV (feature
// columns, list column, gzip, tab-separated, string IDs) and as Parquet
// (list column, scalar columns, integer and string IDs) imports back to the
// same dataset.
func TestCoraTablesRoundTrip(t *testing.T) {
	want := cora(t)
	strID := func(v int) string { return fmt.Sprintf("paper-%d", 31*v+7) }
	intID := func(v int) string { return fmt.Sprint(1_000_000 - 3*v) }
	cases := []struct {
		name    string
		parquet bool
		o       tabletest.Options
		delim   byte
	}{
		{"csv columns", false, tabletest.Options{}, 0},
		{"csv list gzip string-ids", false, tabletest.Options{ListFeatures: true, Gzip: true, ID: strID}, 0},
		{"csv tab codes half-edges", false, tabletest.Options{Delim: '\t', SplitCodes: true, ID: intID, HalfEdges: true}, '\t'},
		{"parquet list", true, tabletest.Options{ListFeatures: true}, 0},
		{"parquet columns string-ids codes", true, tabletest.Options{ID: strID, SplitCodes: true}, 0},
	}
	if testing.Short() { // cmd/strata's TestImportCoraTablesTrainsTheSame covers Parquet
		cases = cases[1:2]
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := tabletest.WriteCSV
			if tc.parquet {
				write = tabletest.WriteParquet
			}
			e, n, err := write(dir, want, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := LoadTables(TableOptions{Options: Options{Symmetrize: true, Quiet: true}, Edges: e, Nodes: n, Delimiter: tc.delim})
			if err != nil {
				t.Fatal(err)
			}
			sameDataset(t, res.Dataset, want)
			if (tc.o.ID != nil) != (res.NodeIDs != nil) {
				t.Fatalf("node ID mapping %v, want one iff IDs are not 0..N-1", res.NodeIDs != nil)
			}
			if res.NodeIDs != nil {
				for _, v := range []int{0, 1, 2707} {
					if got := res.NodeIDs.String(v); got != tc.o.ID(v) {
						t.Errorf("node %d has ID %q, want %q", v, got, tc.o.ID(v))
					}
				}
			}
		})
	}
}

// TestTableIDMapping: text and out-of-range IDs are numbered in ascending
// order without a node table, and the numbering is the same for CSV and
// Parquet input; integer IDs in range are the node numbers.
func TestTableIDMapping(t *testing.T) {
	dir := t.TempDir()
	load := func(body string, remap bool) *TableImport {
		t.Helper()
		p := writeFile(t, dir, "e.csv", []byte(body))
		res, err := LoadTables(TableOptions{Options: Options{Quiet: true, RemapIDs: remap}, Edges: p})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	r := load("src,dst\n3,1\n1,0\n", false)
	if r.NodeIDs != nil || r.Dataset.NumNodes() != 4 {
		t.Fatalf("in-range integers: %d nodes, mapping %v; want 4 nodes and none", r.Dataset.NumNodes(), r.NodeIDs)
	}
	// A negative ID after in-range ones switches to numbering by rank.
	r = load("src,dst\n30,10\n10,-5\n", false)
	if got := r.NodeIDs.Ints; !slices.Equal(got, []int64{-5, 10, 30}) {
		t.Fatalf("IDs %v, want [-5 10 30]", got)
	}
	g := r.Dataset.Graph // 30->10 is 2->1, 10->-5 is 1->0
	if !slices.Equal(g.Indptr, []int64{0, 0, 1, 2}) || !slices.Equal(g.Indices, []int32{0, 1}) {
		t.Fatalf("CSR %v %v", g.Indptr, g.Indices)
	}
	// Text after integers: every ID compares as text ("10" < "9" < "b").
	r = load("src,dst\n9,10\n10,b\n", false)
	if got := r.NodeIDs.Strs; !slices.Equal(got, []string{"10", "9", "b"}) {
		t.Fatalf("IDs %q, want [10 9 b]", got)
	}
	r = load("src,dst\n9,007\n", true)
	if got := r.NodeIDs.Strs; !slices.Equal(got, []string{"007", "9"}) {
		t.Fatalf("IDs %q: want \"007\" kept as text", got)
	}
	r = load("src,dst\n100,50\n50,75\n", true)
	if got := r.NodeIDs.Ints; !slices.Equal(got, []int64{50, 75, 100}) {
		t.Fatalf("--remap-ids: %v", got)
	}
}

// TestTableErrors: every malformed input names the file, the row and the
// column.
func TestTableErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, edges, nodes string
		opts               TableOptions
		want               []string
	}{
		{"missing dst", "src,dst\n0,1\n1,\n", "", TableOptions{}, []string{"e.csv: row 2 (line 3), column \"dst\"", "missing node ID"}},
		{"unknown id", "src,dst\n0,1\n1,9\n", "id,label\n0,1\n1,0\n", TableOptions{}, []string{"e.csv: row 2 (line 3), column \"dst\"", "node ID 9 is not in the node table"}},
		{"bad weight", "src,dst,weight\n0,1,1\n1,0,inf\n", "", TableOptions{}, []string{"row 2 (line 3), column \"weight\"", "finite"}},
		{"field count", "src,dst\n0,1\n1\n", "", TableOptions{}, []string{"row 2 (line 3)", "1 fields, the header has 2"}},
		{"no columns", "a,b\n0,1\n", "", TableOptions{}, []string{"e.csv", "no source or destination column"}},
		{"named missing", "src,dst\n0,1\n", "", TableOptions{Weight: "w8"}, []string{"no column \"w8\" for --weight-col"}},
		{"dup node id", "src,dst\n0,1\n", "id,label\n5,0\n6,1\n5,0\n", TableOptions{}, []string{"n.csv: row 3 (line 4), column \"id\"", "repeats the ID of row 1"}},
		{"bad label", "src,dst\n0,1\n", "id,label\n0,1\n1,-2\n", TableOptions{}, []string{"n.csv: row 2 (line 3), column \"label\"", "out of range"}},
		{"mixed label", "src,dst\n0,1\n", "id,label\n0,1\n1,cat\n", TableOptions{}, []string{"row 2 (line 3), column \"label\"", "earlier labels are integers"}},
		{"bad split", "src,dst\n0,1\n", "id,label,split\n0,1,train\n1,0,holdout\n", TableOptions{}, []string{"row 2 (line 3), column \"split\"", "want a split"}},
		{"feature width", "src,dst\n0,1\n", "id,feat\n0,\"[1,2]\"\n1,\"[1,2,3]\"\n", TableOptions{}, []string{"row 2 (line 3), column \"feat\"", "3 feature values, earlier rows have 2"}},
		{"bad feature", "src,dst\n0,1\n", "id,feat_0,feat_1\n0,1,2\n1,3,abc\n", TableOptions{}, []string{"row 2 (line 3), column \"feat_1\"", "abc"}},
		{"open quote", "src,dst\n\"0,1\n", "", TableOptions{}, []string{"row 1 (line 2)", "quoted field not closed"}},
		{"split without labels", "src,dst\n0,1\n", "id,split\n0,train\n1,test\n", TableOptions{}, []string{"n.csv, column \"split\"", "needs labels"}},
		{"typed edges", "src,dst,etype\n0,1,cites\n1,0,writes\n", "", TableOptions{}, []string{"column \"etype\"", "not supported yet", "\"cites\" at row 1", "\"writes\" at row 2"}},
		{"typed nodes", "src,dst\n0,1\n", "id,ntype\n0,paper\n1,author\n", TableOptions{}, []string{"column \"ntype\"", "not supported yet"}},
		{"empty", "", "", TableOptions{}, []string{"e.csv", "empty file"}},
		{"dup header", "src,src\n", "", TableOptions{}, []string{"e.csv:1", "repeats the name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Quiet = true
			o.Edges = writeFile(t, dir, "e.csv", []byte(tc.edges))
			if tc.nodes != "" {
				o.Nodes = writeFile(t, dir, "n.csv", []byte(tc.nodes))
			}
			_, err := LoadTables(o)
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			var ue *UnsupportedError
			if strings.HasPrefix(tc.name, "typed") != errors.As(err, &ue) {
				t.Errorf("%T: want *UnsupportedError exactly for typed input", err)
			}
		})
	}
	// One edge type is a plain graph.
	o := TableOptions{Options: Options{Quiet: true}, Edges: writeFile(t, dir, "e.csv", []byte("src,dst,etype\n0,1,cites\n1,0,cites\n"))}
	if _, err := LoadTables(o); err != nil {
		t.Fatalf("one edge type: %v", err)
	}
}

// TestParquetErrorsNameRowAndColumn: a bad cell of a Parquet table is
// reported with its row (across row groups) and column.
func TestParquetErrorsNameRowAndColumn(t *testing.T) {
	// 2500 nodes: rows span three row groups of 1000.
	const n = 2500
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1)}
	d := &dataset.Dataset{Graph: g, Directed: true, FeatDim: 2, Features: make([]float32, 2*n), NumClasses: 2, Labels: make([]int32, n)}
	for v := range n {
		if v%3 == 0 {
			d.Test = append(d.Test, int32(v))
		}
	}
	dir := t.TempDir()
	_, nodes, err := tabletest.WriteParquet(dir, d, tabletest.Options{ListFeatures: true, SplitCodes: true})
	if err != nil {
		t.Fatal(err)
	}
	e := writeFile(t, dir, "e.csv", []byte("src,dst\n0,1\n"))
	// The split column as IDs: codes -1, 2 repeat from row 3 on.
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e, Nodes: nodes, ID: "split", Label: "-", Split: "-"})
	if err == nil || !strings.Contains(err.Error(), "nodes.parquet: row 3, column \"split\": node ID -1 repeats the ID of row 2") {
		t.Fatalf("error %v: want the Parquet file, a row and column \"split\"", err)
	}
	// A list column where a scalar is wanted.
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e, Nodes: nodes, Label: "feat", Features: []string{"-"}})
	if err == nil || !strings.Contains(err.Error(), "nodes.parquet: row 1, column \"feat\"") {
		t.Fatalf("list as label: %v", err)
	}
	// A bad label in the third row group: row 2001.
	d.Labels[2000] = -7
	_, nodes, err = tabletest.WriteParquet(dir, d, tabletest.Options{ListFeatures: true, SplitCodes: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadTables(TableOptions{Options: Options{Quiet: true}, Edges: e, Nodes: nodes})
	if err == nil || !strings.Contains(err.Error(), "nodes.parquet: row 2001, column \"label\": label -7 out of range") {
		t.Fatalf("bad label in row group 3: %v", err)
	}
}

// TestCSVSplitFields covers quoting, trimming and delimiters.
func TestCSVSplitFields(t *testing.T) {
	for _, tc := range []struct {
		line  string
		delim byte
		want  []string
		bad   string
	}{
		{`a,b,c`, ',', []string{"a", "b", "c"}, ""},
		{` a , b ,c `, ',', []string{"a", "b", "c"}, ""},
		{`"a,b","say ""hi""",`, ',', []string{"a,b", `say "hi"`, ""}, ""},
		{"a\t\tc", '\t', []string{"a", "", "c"}, ""},
		{`"x" ,y`, ',', []string{"x", "y"}, ""},
		{`"x"z,y`, ',', nil, "text after a closing quote"},
		{`"x,y`, ',', nil, "not closed"},
		{`a;b`, ';', []string{"a", "b"}, ""},
	} {
		ct := &csvTable{delim: tc.delim}
		f, _, msg := ct.split([]byte(tc.line))
		if tc.bad != "" {
			if !strings.Contains(msg, tc.bad) {
				t.Errorf("%q: message %q, want %q", tc.line, msg, tc.bad)
			}
			continue
		}
		var got []string
		for _, x := range f {
			got = append(got, string(x))
		}
		if msg != "" || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q (%s), want %q", tc.line, got, msg, tc.want)
		}
	}
}

// TestTableWeights: a weight column becomes edge weights (summed over
// duplicates, mirrored by Symmetrize).
func TestTableWeights(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "e.csv", []byte("source,target,w\n0,1,0.5\n0,1,0.25\n1,2,2\n"))
	res, err := LoadTables(TableOptions{Options: Options{Quiet: true, Symmetrize: true}, Edges: p})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Dataset.Graph
	if !slices.Equal(g.Indices, []int32{1, 0, 2, 1}) || !slices.Equal(g.Weights, []float32{0.75, 0.75, 2, 2}) {
		t.Fatalf("indices %v weights %v", g.Indices, g.Weights)
	}
	if _, err := os.Stat(filepath.Join(dir, "e.csv")); err != nil {
		t.Fatal(err)
	}
}
