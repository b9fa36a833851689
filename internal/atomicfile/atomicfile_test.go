package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("got %q, %v; want new", got, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	assertOnly(t, dir, "r.json")
}

func TestFailureLeavesTargetUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	// A failing writer and a crash before the rename both keep the old file.
	err := Write(path, func(w io.Writer) error { w.Write([]byte("half")); return boom }, Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	err = Write(path, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err },
		Options{BeforeRename: func(string) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("target changed to %q", got)
	}
	assertOnly(t, dir, "ck")
}

func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want only %s", names, name)
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	if err := WriteJSON(path, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"a\": 1\n}\n"; string(got) != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	// A value JSON cannot encode fails before touching the file, naming it.
	err = WriteJSON(path, map[string]any{"f": func() {}})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v; want an encoding error naming %s", err, path)
	}
	if again, _ := os.ReadFile(path); string(again) != string(got) {
		t.Fatal("a failed WriteJSON changed the file")
	}
}
