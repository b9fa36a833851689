package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// recorder captures what DatasetsDir does with a missing folder.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a recorder in its own goroutine (Skipf and Fatalf end
// it as they would end a test).
func run(t *testing.T, fn func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r
}

// TestMissingDatasetsAreLoud: without the datasets the skip names
// STRATA_DATASETS and the path looked at; STRATA_REQUIRE_DATASETS=1 makes
// it a failure.
func TestMissingDatasetsAreLoud(t *testing.T) {
	missingDir := filepath.Join(t.TempDir(), "nowhere")
	t.Setenv("STRATA_DATASETS", missingDir)
	t.Setenv(RequireEnv, "")
	r := run(t, func(tb testing.TB) { DatasetsDir(tb) })
	if !strings.Contains(r.skipped, "STRATA_DATASETS") || !strings.Contains(r.skipped, missingDir) || r.failed != "" {
		t.Fatalf("skip %q, failure %q", r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	r = run(t, func(tb testing.TB) { DatasetsDir(tb) })
	if !strings.Contains(r.failed, missingDir) || !strings.Contains(r.failed, RequireEnv) || r.skipped != "" {
		t.Fatalf("required: skip %q, failure %q", r.skipped, r.failed)
	}
	// A folder without the one dataset asked for.
	t.Setenv("STRATA_DATASETS", t.TempDir())
	r = run(t, func(tb testing.TB) { Dataset(tb, "citeseer") })
	if !strings.Contains(r.failed, filepath.Join("citeseer", "meta.json")) {
		t.Fatalf("missing citeseer, required: skip %q, failure %q", r.skipped, r.failed)
	}
}
