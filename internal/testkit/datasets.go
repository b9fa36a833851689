package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// DatasetsDir returns the directory holding the shared real datasets
// (cora, citeseer, ...): $STRATA_DATASETS if set, else ../shared/datasets
// relative to the repository root (the directory holding go.mod). If
// neither exists the test is skipped with a message saying how to enable it.
func DatasetsDir(t testing.TB) string {
	t.Helper()
	if dir, ok := FindDatasetsDir(); ok {
		return dir
	}
	t.Skip("shared datasets not found: set STRATA_DATASETS or place them at ../shared/datasets relative to the repository root")
	return ""
}

// FindDatasetsDir is DatasetsDir without a test: it reports the directory
// and whether it exists.
func FindDatasetsDir() (string, bool) {
	if dir := os.Getenv("STRATA_DATASETS"); dir != "" {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir, true
		}
		return dir, false
	}
	root, ok := repoRoot()
	if !ok {
		return "", false
	}
	dir := filepath.Join(filepath.Dir(root), "shared", "datasets")
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, true
	}
	return dir, false
}

// repoRoot walks up from the working directory (a test runs in its
// package's directory) to the directory holding go.mod.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Dataset returns DatasetsDir(t)/name, skipping the test if that dataset
// is missing.
func Dataset(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(DatasetsDir(t), name)
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); err != nil {
		t.Skipf("shared dataset %s not found in %s", name, filepath.Dir(dir))
	}
	return dir
}
