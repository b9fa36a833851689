package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/importer/tabletest"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/train"
)

// trainLosses trains 2 epochs on dataset (a name or directory) and returns
// the report.
func trainLosses(t *testing.T, ds, report string, extra ...string) *train.Report {
	t.Helper()
	args := append([]string{"--quiet", "train", "--dataset", ds, "--epochs", "2", "--report", report}, extra...)
	if code, _, errOut := strata(t, args...); code != 0 {
		t.Fatalf("train on %s: exit %d: %s", ds, code, errOut)
	}
	r, err := train.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestImportCoraTablesTrainsTheSame: the built-in Cora written out as CSV
// and as Parquet (edges + nodes with features, labels and splits) imports
// with 'strata import --edges --nodes' to a dataset with the built-in's
// fingerprint, and a short training run gives the same losses (with
// -short, for the Parquet import only).
func TestImportCoraTablesTrainsTheSame(t *testing.T) {
	skipUnderRace(t)
	cora, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := trainLosses(t, "cora", filepath.Join(dir, "base.json"))
	strID := func(v int) string { return fmt.Sprintf("paper %d", 3*v) }
	for _, tc := range []struct {
		name    string
		parquet bool
		o       tabletest.Options
	}{
		{"csv", false, tabletest.Options{ID: strID, Gzip: true}},
		{"parquet", true, tabletest.Options{ListFeatures: true, SplitCodes: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(dir, tc.name)
			os.MkdirAll(src, 0o755)
			write := tabletest.WriteCSV
			if tc.parquet {
				write = tabletest.WriteParquet
			}
			e, n, err := write(src, cora, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(dir, tc.name+"-ds")
			code, out, errOut := strata(t, "--quiet", "import", "--edges", e, "--nodes", n, "--symmetrize", dst)
			if code != 0 {
				t.Fatalf("import: exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "table layout") || !strings.Contains(out, "nodes       2708") {
				t.Errorf("import output:\n%s", out)
			}
			d, err := dataset.Open(dst, dataset.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fp := d.Fingerprint()
			d.Close()
			if want := cora.Fingerprint(); fp != want {
				t.Fatalf("fingerprint %s, want the built-in's %s", fp, want)
			}
			ids, err := os.ReadFile(filepath.Join(dst, "node_ids.csv"))
			if tc.o.ID != nil && (err != nil || !strings.HasPrefix(string(ids), "node,id\n0,paper 0\n1,paper 3\n")) {
				t.Errorf("node_ids.csv: %v %q", err, ids[:min(len(ids), 40)])
			}
			if tc.o.ID == nil && err == nil {
				t.Errorf("node_ids.csv written though the IDs are the node numbers")
			}
			if testing.Short() && !tc.parquet {
				return // the same fingerprint means the same data; one training run suffices here
			}
			got := trainLosses(t, dst, filepath.Join(dir, tc.name+".json"))
			if len(got.Epochs) != len(base.Epochs) || got.TestAccuracy != base.TestAccuracy {
				t.Fatalf("test accuracy %v, built-in %v", got.TestAccuracy, base.TestAccuracy)
			}
			for i := range got.Epochs {
				if got.Epochs[i].Loss != base.Epochs[i].Loss {
					t.Fatalf("epoch %d loss %v, built-in %v", i, got.Epochs[i].Loss, base.Epochs[i].Loss)
				}
			}
		})
	}
}

// TestImportWeightsSampleByWeight: a weight column becomes edge weights
// that 'train --weighted' samples by: with fanout 1, a neighbor whose edge
// weighs 0 is never drawn.
func TestImportWeightsSampleByWeight(t *testing.T) {
	dir := t.TempDir()
	// Node v (0..199) has in-edges from (v+1) and (v+2) mod 200; the one
	// from v+1 weighs 0. Features and labels make the dataset trainable.
	var eb, nb strings.Builder
	eb.WriteString("src,dst,weight\n")
	nb.WriteString("id,feat,label,split\n")
	const n = 200
	for v := range n {
		fmt.Fprintf(&eb, "%d,%d,0\n%d,%d,%g\n", (v+1)%n, v, (v+2)%n, v, 0.5+float64(v%3))
		fmt.Fprintf(&nb, "%d,\"[%d, %d]\",%d,%s\n", v, v%2, (v/2)%2, v%2, [3]string{"train", "val", "test"}[v%3])
	}
	e := writeFile(t, filepath.Join(dir, "e.csv"), eb.String())
	nf := writeFile(t, filepath.Join(dir, "n.csv"), nb.String())
	dst := filepath.Join(dir, "ds")
	if code, _, errOut := strata(t, "--quiet", "import", "--edges", e, "--nodes", nf, dst); code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	d, err := dataset.Open(dst, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in, err := d.InAdjacency()
	if err != nil {
		t.Fatal(err)
	}
	if in.Weights == nil {
		t.Fatal("imported dataset has no edge weights")
	}
	s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: []int{1}, Weighted: true})
	if err != nil {
		t.Fatal(err)
	}
	seeds := make([]int32, n)
	for i := range seeds {
		seeds[i] = int32(i)
	}
	for b := range 5 {
		mb, err := s.Sample(seeds, sample.Key{Seed: 1, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		blk := mb.Blocks[0]
		for v := range blk.NumDst {
			for _, li := range blk.Indices[blk.Indptr[v]:blk.Indptr[v+1]] {
				if u := blk.SrcNodes[li]; u != int32((int(blk.SrcNodes[v])+2)%n) {
					t.Fatalf("node %d drew neighbor %d, whose edge weighs 0", blk.SrcNodes[v], u)
				}
			}
		}
	}
	code, _, errOut := strata(t, "--quiet", "train", "--dataset", dst, "--epochs", "1", "--weighted", "--fanouts", "2,2", "--hidden", "8")
	if code != 0 {
		t.Fatalf("train --weighted on the imported weights: exit %d: %s", code, errOut)
	}
}

// TestImportAttachAndSplit: features and labels attach to a SNAP edge
// list; --node-split and --edge-split make seeded splits, the edge split
// lands in DST/edge_split and reads back; 'strata split' remakes splits in
// place keeping the side files.
func TestImportAttachAndSplit(t *testing.T) {
	dir := t.TempDir()
	cora, _ := builtin.Load("cora")
	var el strings.Builder
	g := cora.Graph
	for u := range int(g.NumRows) {
		for _, v := range g.Neighbors(int32(u)) {
			fmt.Fprintf(&el, "%d %d\n", u, v)
		}
	}
	snap := writeFile(t, filepath.Join(dir, "cora.txt"), el.String())
	feats, labels := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	if err := tabletest.WriteNPY(feats, []int64{2708, 1433}, cora.Features); err != nil {
		t.Fatal(err)
	}
	if err := tabletest.WriteNPY(labels, []int64{2708}, cora.Labels); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "ds")
	code, out, errOut := strata(t, "--quiet", "import", snap, dst, "--features", feats, "--labels", labels,
		"--node-split", "0.6,0.2,0.2", "--stratify", "--edge-split", "0.85,0.05,0.1", "--split-seed", "4")
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "features    1433") || !strings.Contains(out, "edge_split/") {
		t.Fatalf("import output:\n%s", out)
	}
	d, err := dataset.Open(dst, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Features, cora.Features) || !slices.Equal(d.Labels, cora.Labels) || len(d.Train) < 1600 || len(d.Train) > 1650 {
		t.Fatalf("attached features/labels differ or train has %d nodes", len(d.Train))
	}
	tr, va, te, _ := split.Nodes(cora.Labels, split.Fractions{0.6, 0.2, 0.2}, 4, true)
	if !slices.Equal(d.Train, tr) || !slices.Equal(d.Val, va) || !slices.Equal(d.Test, te) {
		t.Fatalf("node split differs from split.Nodes with the same seed")
	}
	es, err := split.ReadEdges(dst, d)
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The edge list is directed (no --symmetrize): 10% of its 10556 edges.
	if !es.Directed || len(es.Src[0]) != 8973 || len(es.Src[1]) != 527 || len(es.Src[2]) != 1056 {
		t.Fatalf("edge split: directed %v, %d/%d/%d edges, want directed 8973/527/1056", es.Directed, len(es.Src[0]), len(es.Src[1]), len(es.Src[2]))
	}

	// strata split: a new node split in place keeps edge_split/.
	code, out, errOut = strata(t, "--quiet", "split", dst, "--node-split", "0.5,0.25,0.25", "--split-seed", "9")
	if code != 0 {
		t.Fatalf("split: exit %d: %s", code, errOut)
	}
	d, err = dataset.Open(dst, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tr, _, _, _ = split.Nodes(cora.Labels, split.Fractions{0.5, 0.25, 0.25}, 9, false)
	if !slices.Equal(d.Train, tr) || !strings.Contains(out, "train 1354") {
		t.Fatalf("strata split: train %d nodes; output %q", len(d.Train), out)
	}
	if _, err := split.ReadEdges(dst, d); err != nil {
		t.Fatalf("edge split lost by 'strata split --node-split': %v", err)
	}
	// An edge split alone replaces edge_split/ without rewriting arrays.
	code, out, errOut = strata(t, "--quiet", "split", dst, "--edge-split", "0.7,0.1,0.2", "--split-seed", "2")
	if code != 0 || !strings.Contains(out, "edge split (seed 2)") {
		t.Fatalf("split --edge-split: exit %d: %s %s", code, out, errOut)
	}
	es2, err := split.ReadEdges(dst, d)
	if err != nil || es2.Fractions != (split.Fractions{0.7, 0.1, 0.2}) {
		t.Fatalf("new edge split: %v %+v", err, es2)
	}
}

// TestImportTableUsageErrors: table flags without a table, bad
// delimiters and fractions are usage errors (exit 2, one line naming the
// flag); typed input is refused naming the column.
func TestImportTableUsageErrors(t *testing.T) {
	dir := t.TempDir()
	e := writeFile(t, filepath.Join(dir, "e.csv"), "src,dst,etype\n0,1,a\n1,0,b\n")
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "--nodes", e, e, out}, "--nodes needs --edges"},
		{[]string{"import", "--edges", e, e, out}, "--edges replaces SRC"},
		{[]string{"import", "--edges", e}, "want DST"},
		{[]string{"import", e}, "want SRC and DST"},
		{[]string{"import", "--edges", e, "--delimiter", "ab", out}, "--delimiter"},
		{[]string{"import", "--edges", e, "--node-split", "0.5,0.6,0.1", out}, "--node-split"},
		{[]string{"import", "--edges", e, "--edge-split", "0.5", out}, "--edge-split"},
		{[]string{"import", "--edges", e, "--label-col", "y", out}, "--label-col needs --nodes"},
		{[]string{"import", "--edges", e, "--stratify", out}, "--stratify needs --node-split"},
		{[]string{"split", out}, "want --node-split and/or --edge-split"},
		{[]string{"import", "--kind", "npy-typed", dir, out, "--node-split", "0.6,0.2,0.2"}, "--node-split does not apply to the typed layout"},
		{[]string{"import", "--edges", e, "--add-reverse", out}, "--add-reverse applies to the typed layouts"},
	} {
		code, _, errOut := strata(t, tc.args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2, one line with %q", tc.args, code, errOut, tc.want)
		}
	}
	code, _, errOut := strata(t, "--quiet", "import", "--edges", e, out)
	if code != 1 || !strings.Contains(errOut, `column "etype"`) || !strings.Contains(errOut, "not supported yet") {
		t.Errorf("typed edges: exit %d, %q", code, errOut)
	}
	code, _, errOut = strata(t, "--quiet", "import", "--edges", e, "--edge-type-col=-", out)
	if code != 0 {
		t.Errorf("typed edges with the type column ignored: exit %d, %q", code, errOut)
	}
}
