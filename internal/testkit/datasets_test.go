package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDatasetsDirEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("STRATA_DATASETS", dir)
	if got := DatasetsDir(t); got != dir {
		t.Fatalf("got %q want %q", got, dir)
	}
	t.Setenv("STRATA_DATASETS", filepath.Join(dir, "missing"))
	if _, ok := FindDatasetsDir(); ok {
		t.Fatal("missing dir reported as found")
	}
}

func TestDatasetsDirDefault(t *testing.T) {
	t.Setenv("STRATA_DATASETS", "")
	dir, ok := FindDatasetsDir()
	if !ok {
		t.Skip("no ../shared/datasets here")
	}
	if _, err := os.Stat(filepath.Join(dir, "cora", "meta.json")); err != nil {
		t.Fatalf("found %s but it has no cora: %v", dir, err)
	}
}
