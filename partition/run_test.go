package partition

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
)

func TestRun(t *testing.T) {
	d := smallDataset(t)
	tmp := t.TempDir()
	dsDir := filepath.Join(tmp, "grid")
	if err := dataset.Write(dsDir, d, dataset.WriteOptions{NoSync: true, Quiet: true}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "parts")
	var buf bytes.Buffer
	opts := RunOptions{Options: Options{K: 3, Seed: 5}, Constraints: []Constraint{ConstraintNodes, ConstraintTrain}, NoSync: true, Out: &buf}
	rep, err := Run(context.Background(), dsDir, out, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"edge cut:", "balance:   nodes", "balance:   train", "parts:", "time:"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	saved, pds, err := Load(out, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pds.Close()
	if !slices.Equal(saved.Book.Offsets(), rep.Book) {
		t.Fatalf("book %v, report %v", saved.Book.Offsets(), rep.Book)
	}
	if saved.Meta.EdgeCut != rep.Result.EdgeCut || saved.Meta.Dataset != "grid" || !slices.Equal(saved.Meta.Constraints, []string{"nodes", "train"}) {
		t.Fatalf("meta %+v", saved.Meta)
	}
	// The stored dataset is the input renumbered by the stored permutation.
	want, err := PermuteDataset(d, saved.OldToNew)
	if err != nil {
		t.Fatal(err)
	}
	got := dataset.Dataset{Name: pds.Name, Graph: pds.Graph, Directed: pds.Directed, FeatDim: pds.FeatDim, Features: pds.Features,
		NumClasses: pds.NumClasses, Labels: pds.Labels, Train: pds.Train, Val: pds.Val, Test: pds.Test}
	if !reflect.DeepEqual(&got, want) {
		t.Fatal("stored dataset differs from the renumbered input")
	}
	// Parts recomputed from the book match the partition, and each part
	// holds its share of training nodes.
	for v, p := range rep.Result.Parts {
		if saved.Book.Owner(int64(saved.OldToNew[v])) != int(p) {
			t.Fatalf("node %d: book owner differs from part %d", v, p)
		}
	}
	if rep.Result.Balance[1] > 1.03 {
		t.Errorf("train balance %v", rep.Result.Balance[1])
	}

	// An existing output is kept unless Overwrite is set.
	if _, err := Run(context.Background(), dsDir, out, opts, nil); err == nil {
		t.Fatal("second Run without Overwrite succeeded")
	}
	opts.Overwrite = true
	opts.K = 2
	if _, err := Run(context.Background(), dsDir, out, opts, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadFile(filepath.Join(out, FileName)); err != nil || s.Book.K() != 2 {
		t.Fatalf("after overwrite: %v", err)
	}
	// A directory that is not a partition output is never replaced.
	other := filepath.Join(tmp, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o644)
	if _, err := Run(context.Background(), dsDir, other, opts, nil); err == nil {
		t.Fatal("Run replaced a foreign directory")
	}
	// No temporary directories are left behind.
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
	// Errors: missing dataset, bad options.
	if _, err := Run(context.Background(), filepath.Join(tmp, "missing"), filepath.Join(tmp, "o2"), opts, nil); err == nil {
		t.Error("missing dataset accepted")
	}
	bad := opts
	bad.K = 0
	if _, err := Run(context.Background(), dsDir, filepath.Join(tmp, "o3"), bad, nil); !errors.Is(err, ErrInput) {
		t.Errorf("k=0: %v", err)
	}
}
