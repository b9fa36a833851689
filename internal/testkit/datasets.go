package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// RequireEnv names the environment variable that makes missing shared
// datasets a test failure instead of a skip (CI sets it to 1, so the
// accuracy tests cannot pass by skipping).
const RequireEnv = "STRATA_REQUIRE_DATASETS"

// DatasetsDir returns the directory holding the shared real datasets
// (cora, citeseer, ...): $STRATA_DATASETS if set, else ../shared/datasets
// relative to the repository root (the directory holding go.mod). If
// neither exists the test is skipped with a message naming STRATA_DATASETS
// and the path looked at, or fails when STRATA_REQUIRE_DATASETS=1.
func DatasetsDir(t testing.TB) string {
	t.Helper()
	dir, ok := FindDatasetsDir()
	if ok {
		return dir
	}
	if dir == "" {
		dir = "(no repository root found above the working directory)"
	}
	missing(t, "shared datasets not found at %s: set STRATA_DATASETS to the shared datasets folder (e.g. /work/shared/datasets), or place it at ../shared/datasets relative to the repository root", dir)
	return ""
}

// missing skips the test, or fails it when RequireEnv is 1.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf(format+" (%s=1 makes this a failure)", append(args, RequireEnv)...)
	}
	t.Skipf(format, args...)
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

// Dataset returns DatasetsDir(t)/name, skipping the test (failing it
// under STRATA_REQUIRE_DATASETS=1) if that dataset is missing.
func Dataset(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(DatasetsDir(t), name)
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); err != nil {
		missing(t, "shared dataset %s not found: no %s (STRATA_DATASETS=%q)", name, filepath.Join(dir, "meta.json"), os.Getenv("STRATA_DATASETS"))
	}
	return dir
}
