package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// envName matches a STRATA_* environment variable name; a name ending in
// "_" is a prefix in prose (STRATA_GPUSHM_*), not a variable.
var envName = regexp.MustCompile(`STRATA_[A-Z0-9_]*[A-Z0-9]\b`)

// TestConfigurationTable: every STRATA_* name in the module's Go code
// (tests included) and scripts is in docs/configuration.md, and every
// name there still exists, so the table stays complete and true.
func TestConfigurationTable(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, n := range envName.FindAllString(string(doc), -1) {
		documented[n] = true
	}
	used := map[string]string{} // name -> first file using it
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "shared") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(path, ".go") && !(strings.HasPrefix(rel, "scripts"+string(filepath.Separator)) && strings.HasSuffix(path, ".sh")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range envName.FindAllString(string(b), -1) {
			if _, ok := used[n]; !ok {
				used[n] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing, stale []string
	for n, file := range used {
		if !documented[n] {
			missing = append(missing, n+" (used in "+file+")")
		}
	}
	for n := range documented {
		if _, ok := used[n]; !ok {
			stale = append(stale, n)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md lacks (add a line to its table):\n  %s", strings.Join(missing, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("docs/configuration.md names variables no code uses any more: %s", strings.Join(stale, ", "))
	}
	if len(used) < 40 {
		t.Errorf("found only %d STRATA_* names: is the walk looking at the module?", len(used))
	}
}
