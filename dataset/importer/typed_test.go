package importer

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/graph"
)

// ogbMagTiny is a hand-written fixture in OGB's heterogeneous raw layout
// with ogbn-mag's four node types and four relations, its extra files
// (edge_reltype, node_year, nodetype-has-split) and pandas' way of
// writing the one-row tables.
const ogbMagTiny = "testdata/ogbn-mag-tiny"

func TestOGBHeteroFixture(t *testing.T) {
	if k, err := Detect(ogbMagTiny); err != nil || k != OGBHetero {
		t.Fatalf("Detect = %q, %v", k, err)
	}
	h, err := LoadHetero("", ogbMagTiny, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nt := range h.NodeTypes {
		names = append(names, fmt.Sprintf("%s:%d:%d", nt.Name, nt.NumNodes, nt.FeatDim))
	}
	if got := strings.Join(names, " "); got != "author:3:0 field_of_study:2:0 institution:2:0 paper:4:2" {
		t.Fatalf("node types %s", got)
	}
	var rels []string
	for r := range h.EdgeTypes {
		rels = append(rels, fmt.Sprintf("%s:%d", h.EdgeTypeName(r), h.EdgeTypes[r].In.NumEdges()))
	}
	if got := strings.Join(rels, " "); got != "author___affiliated_with___institution:3 author___writes___paper:5 paper___cites___paper:3 paper___has_topic___field_of_study:5" {
		t.Fatalf("relations %s", got)
	}
	if !reflect.DeepEqual(h.NodeTypes[3].Features, []float32{0.5, -1.25, 2, 0, -0.125, 3.5, 1e-3, 42}) {
		t.Fatalf("paper features %v", h.NodeTypes[3].Features)
	}
	if h.Target != 3 || h.NumClasses != 4 || !reflect.DeepEqual(h.Labels, []int32{3, 0, 1, 3}) ||
		!reflect.DeepEqual(h.Train, []int32{0, 1}) || !reflect.DeepEqual(h.Val, []int32{2}) || !reflect.DeepEqual(h.Test, []int32{3}) {
		t.Fatalf("labels %v (%d classes, target %d), splits %v %v %v", h.Labels, h.NumClasses, h.Target, h.Train, h.Val, h.Test)
	}
	// writes, grouped by paper: paper 0 <- authors 0, 1; 1 <- 2; 2 <- 2; 3 <- 0.
	w := h.EdgeTypes[1].In
	if !reflect.DeepEqual(w.Indptr, []int64{0, 2, 3, 4, 5}) || !reflect.DeepEqual(w.Indices, []int32{0, 1, 2, 2, 0}) {
		t.Fatalf("writes %v %v", w.Indptr, w.Indices)
	}
	// Into a typed dataset directory and back.
	dst := filepath.Join(t.TempDir(), "mag")
	if err := ImportHetero("", ogbMagTiny, dst, Options{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	back, err := dataset.OpenHetero(dst, dataset.OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if back.Name != "ogbn-mag-tiny" || !reflect.DeepEqual(back.EdgeTypes[2].In.Indices, h.EdgeTypes[2].In.Indices) {
		t.Fatalf("imported %q differs", back.Name)
	}
	if _, err := Load(OGBHetero, ogbMagTiny, Options{Quiet: true}); err == nil || !strings.Contains(err.Error(), "use LoadHetero") {
		t.Fatalf("Load of a typed layout: %v", err)
	}
}

// fixtureHetero is the hetero preset at a small size with weights on one
// relation and no features on one type, its types and relations in the
// importers' order (sorted by name).
func fixtureHetero(t testing.TB) *dataset.Hetero {
	t.Helper()
	c := gen.HeteroPreset()
	c.Papers, c.PaperDim, c.OtherDim = 50, 3, 4
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	h.NodeTypes[2].FeatDim, h.NodeTypes[2].Features = 0, nil // field
	g := h.EdgeTypes[0].In
	g.Weights = make([]float32, g.NumEdges())
	for i := range g.Weights {
		g.Weights[i] = float32(i%7) + 0.5
	}
	return sortedHetero(h)
}

// sortedHetero reorders h's types by name and relations by (src, rel,
// dst) names.
func sortedHetero(h *dataset.Hetero) *dataset.Hetero {
	order := make([]int, len(h.NodeTypes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(h.NodeTypes[a].Name, h.NodeTypes[b].Name) })
	pos := make([]int, len(order))
	out := *h
	out.NodeTypes = nil
	for i, o := range order {
		pos[o] = i
		out.NodeTypes = append(out.NodeTypes, h.NodeTypes[o])
	}
	out.Target = pos[h.Target]
	out.EdgeTypes = nil
	for _, et := range h.EdgeTypes {
		out.EdgeTypes = append(out.EdgeTypes, dataset.EdgeType{Src: pos[et.Src], Dst: pos[et.Dst], Rel: et.Rel, In: et.In})
	}
	slices.SortFunc(out.EdgeTypes, func(a, b dataset.EdgeType) int {
		return cmp.Or(cmp.Compare(out.NodeTypes[a.Src].Name, out.NodeTypes[b.Src].Name), cmp.Compare(a.Rel, b.Rel),
			cmp.Compare(out.NodeTypes[a.Dst].Name, out.NodeTypes[b.Dst].Name))
	})
	return &out
}

// coo lists a relation's edges as (source, destination) pairs.
func coo(g *graph.CSR) (src, dst []int32) {
	for v := int64(0); v < g.NumRows; v++ {
		for _, u := range g.Neighbors(int32(v)) {
			src, dst = append(src, u), append(dst, int32(v))
		}
	}
	return src, dst
}

// writeTypedNPY writes h in the typed npy layout.
func writeTypedNPY(t testing.TB, dir string, h *dataset.Hetero) {
	for ti, nt := range h.NodeTypes {
		d := filepath.Join("nodes", nt.Name)
		if nt.FeatDim > 0 {
			writeFile(t, dir, filepath.Join(d, "x.npy"), npyBytes("<f4", []int64{nt.NumNodes, int64(nt.FeatDim)}, le(nt.Features)))
		} else {
			writeFile(t, dir, filepath.Join(d, "num_nodes.npy"), npyBytes("<i8", []int64{}, le(nt.NumNodes)))
		}
		if ti == h.Target {
			writeFile(t, dir, filepath.Join(d, "y.npy"), npyBytes("<i4", []int64{nt.NumNodes}, le(h.Labels)))
			for _, s := range []struct {
				name string
				ids  []int32
			}{{"train_idx.npy", h.Train}, {"val_idx.npy", h.Val}, {"test_idx.npy", h.Test}} {
				writeFile(t, dir, filepath.Join(d, s.name), npyBytes("<i4", []int64{int64(len(s.ids))}, le(s.ids)))
			}
		}
	}
	for r, et := range h.EdgeTypes {
		d := filepath.Join("edges", h.EdgeTypeName(r))
		s, ds := coo(et.In)
		e := int64(len(s))
		idx := make([]int64, 0, 2*e)
		for _, v := range s {
			idx = append(idx, int64(v))
		}
		for _, v := range ds {
			idx = append(idx, int64(v))
		}
		writeFile(t, dir, filepath.Join(d, "edge_index.npy"), npyBytes("<i8", []int64{2, e}, le(idx)))
		if et.In.Weights != nil {
			writeFile(t, dir, filepath.Join(d, "weights.npy"), npyBytes("<f4", []int64{e}, le(et.In.Weights)))
		}
	}
}

// writeOGBHetero writes h in OGB's heterogeneous raw layout (gzip).
func writeOGBHetero(t testing.TB, dir string, h *dataset.Hetero) {
	var names, counts, has []string
	for ti, nt := range h.NodeTypes {
		names, counts = append(names, nt.Name), append(counts, fmt.Sprint(nt.NumNodes))
		has = append(has, strconv.FormatBool(ti == h.Target))
		if nt.FeatDim > 0 {
			var b strings.Builder
			for i := int64(0); i < nt.NumNodes; i++ {
				for j := 0; j < nt.FeatDim; j++ {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteString(strconv.FormatFloat(float64(nt.Features[i*int64(nt.FeatDim)+int64(j)]), 'g', -1, 32))
				}
				b.WriteByte('\n')
			}
			writeFile(t, dir, "raw/node-feat/"+nt.Name+"/node-feat.csv.gz", []byte(b.String()))
		}
	}
	writeFile(t, dir, "raw/num-node-dict.csv.gz", []byte(strings.Join(names, ",")+"\n"+strings.Join(counts, ",")+"\n"))
	writeFile(t, dir, "raw/nodetype-has-label.csv.gz", []byte(strings.Join(names, ",")+"\n"+strings.Join(has, ",")+"\n"))
	var trip strings.Builder
	for r, et := range h.EdgeTypes {
		fmt.Fprintf(&trip, "%s,%s,%s\n", h.NodeTypes[et.Src].Name, et.Rel, h.NodeTypes[et.Dst].Name)
		s, d := coo(et.In)
		var b strings.Builder
		for i := range s {
			fmt.Fprintf(&b, "%d,%d\n", s[i], d[i])
		}
		base := "raw/relations/" + h.EdgeTypeName(r) + "/"
		writeFile(t, dir, base+"edge.csv.gz", []byte(b.String()))
		writeFile(t, dir, base+"num-edge-list.csv.gz", []byte(fmt.Sprintf("%d\n", len(s))))
	}
	writeFile(t, dir, "raw/triplet-type-list.csv.gz", []byte(trip.String()))
	tn := h.NodeTypes[h.Target].Name
	var labels strings.Builder
	for _, l := range h.Labels {
		fmt.Fprintf(&labels, "%d\n", l)
	}
	writeFile(t, dir, "raw/node-label/"+tn+"/node-label.csv.gz", []byte(labels.String()))
	for _, s := range []struct {
		name string
		ids  []int32
	}{{"train", h.Train}, {"valid", h.Val}, {"test", h.Test}} {
		var b strings.Builder
		for _, v := range s.ids {
			fmt.Fprintf(&b, "%d\n", v)
		}
		writeFile(t, dir, "split/random/"+tn+"/"+s.name+".csv.gz", []byte(b.String()))
	}
}

func sameTyped(t *testing.T, got, want *dataset.Hetero) {
	t.Helper()
	if len(got.NodeTypes) != len(want.NodeTypes) || len(got.EdgeTypes) != len(want.EdgeTypes) || got.Target != want.Target || got.NumClasses != want.NumClasses {
		t.Fatalf("shape: %d/%d types, target %d/%d, %d/%d classes", len(got.NodeTypes), len(got.EdgeTypes), got.Target, got.NumClasses, len(want.NodeTypes), want.Target)
	}
	for i, nt := range want.NodeTypes {
		g := got.NodeTypes[i]
		if g.Name != nt.Name || g.NumNodes != nt.NumNodes || g.FeatDim != nt.FeatDim || !slices.Equal(g.Features, nt.Features) {
			t.Fatalf("node type %d: got %s %d x %d, want %s %d x %d (or features differ)", i, g.Name, g.NumNodes, g.FeatDim, nt.Name, nt.NumNodes, nt.FeatDim)
		}
	}
	for r, et := range want.EdgeTypes {
		g := got.EdgeTypes[r]
		if g.Src != et.Src || g.Dst != et.Dst || g.Rel != et.Rel || !reflect.DeepEqual(g.In, et.In) {
			t.Fatalf("relation %d (%s) differs", r, want.EdgeTypeName(r))
		}
	}
	for _, c := range [][2][]int32{{got.Labels, want.Labels}, {got.Train, want.Train}, {got.Val, want.Val}, {got.Test, want.Test}} {
		if !slices.Equal(c[0], c[1]) {
			t.Fatalf("labels or splits differ: %v vs %v", c[0], c[1])
		}
	}
}

// TestTypedImportersRoundTrip writes one typed dataset in both typed
// layouts and reads it back equal (the OGB layout has no edge weights).
func TestTypedImportersRoundTrip(t *testing.T) {
	want := fixtureHetero(t)
	dir := filepath.Join(t.TempDir(), "npy")
	writeTypedNPY(t, dir, want)
	if k, err := Detect(dir); err != nil || k != TypedNPY {
		t.Fatalf("Detect = %q, %v", k, err)
	}
	got, err := LoadHetero("", dir, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	got.Name = want.Name
	sameTyped(t, got, want)

	odir := filepath.Join(t.TempDir(), "ogb")
	noW := *want
	noW.EdgeTypes = slices.Clone(want.EdgeTypes)
	for r := range noW.EdgeTypes {
		g := *noW.EdgeTypes[r].In
		g.Weights = nil
		noW.EdgeTypes[r].In = &g
	}
	writeOGBHetero(t, odir, &noW)
	got, err = LoadOGBHetero(odir, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	sameTyped(t, got, &noW)
}

func TestTypedImportErrors(t *testing.T) {
	h := fixtureHetero(t)
	cases := []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"bad relation folder", func(dir string) {
			os.Rename(filepath.Join(dir, "edges", h.EdgeTypeName(0)), filepath.Join(dir, "edges", "author__writes__paper"))
		}, "want src___rel___dst"},
		{"source out of range", func(dir string) {
			writeFile(t, dir, "nodes/author/num_nodes.npy", npyBytes("<i8", []int64{1}, le(int64(2))))
			os.Remove(filepath.Join(dir, "nodes/author/x.npy"))
		}, "source ID"},
		{"two labeled types", func(dir string) {
			writeFile(t, dir, "nodes/author/y.npy", npyBytes("<i4", []int64{h.NodeTypes[0].NumNodes}, le(make([]int32, h.NodeTypes[0].NumNodes))))
		}, "both labeled"},
		{"weights length", func(dir string) {
			writeFile(t, dir, "edges/"+h.EdgeTypeName(0)+"/weights.npy", npyBytes("<f4", []int64{1}, le(float32(1))))
		}, "weights must have shape"},
		{"bad type name", func(dir string) { os.Mkdir(filepath.Join(dir, "nodes", "-x"), 0o755) }, "must start with a letter or digit"},
		{"no relations", func(dir string) {
			os.RemoveAll(filepath.Join(dir, "edges"))
			os.Mkdir(filepath.Join(dir, "edges"), 0o755)
		}, "no relation folders"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "npy")
			writeTypedNPY(t, dir, h)
			c.edit(dir)
			_, err := LoadTypedNPY(dir, Options{Quiet: true})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	ogb := []struct {
		name string
		file string
		data string
		want string
	}{
		{"count", "raw/num-node-dict.csv.gz", "author,paper\nx,3\n", "num-node-dict.csv.gz:2:1: node type \"author\": bad count \"x\""},
		{"two graphs", "raw/num-node-dict.csv.gz", "a,b\n1,2\n3,4\n", "several graphs"},
		{"unknown type", "raw/triplet-type-list.csv.gz", "author,writes,venue\n", "triplet-type-list.csv.gz:1:15: \"venue\" is not a node type"},
		{"edge range", "raw/relations/author___writes___paper/edge.csv.gz", "0,0\n1,99\n", "edge.csv.gz:2: field 2: paper ID 99 out of range [0, 4)"},
		{"edge count", "raw/relations/paper___cites___paper/num-edge-list.csv.gz", "7\n", "has 3 edges, num-edge-list.csv.gz says 7"},
		{"feature rows", "raw/node-feat/paper/node-feat.csv.gz", "1,2\n", "has 1 rows, num-node-dict says 4 paper nodes"},
		{"has label", "raw/nodetype-has-label.csv.gz", "author,field_of_study,institution,paper\nFalse,False,False,maybe\n", "want True or False"},
		{"split ID", "split/time/paper/valid.csv.gz", "4\n", "bad node ID \"4\""},
	}
	for _, c := range ogb {
		t.Run("ogb "+c.name, func(t *testing.T) {
			dir := copyTree(t, ogbMagTiny)
			writeFile(t, dir, c.file, []byte(c.data))
			_, err := LoadOGBHetero(dir, Options{Quiet: true})
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, dataset.ErrCorruption) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a ParseError containing %q", err, c.want)
			}
		})
	}
}

// copyTree copies the fixture folder src into a temporary directory.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
