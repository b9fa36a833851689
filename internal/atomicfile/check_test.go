package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: Check accepts a new or existing file (or a symbolic link)
// in a directory that takes files, and refuses, naming the path, a
// directory, a missing directory and a directory that is a file; it
// leaves nothing behind.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "old.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{filepath.Join(dir, "new.json"), file, link} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%s): %v", ok, err)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{dir, dir + " is a directory, not a file"},
		{filepath.Join(dir, "missing", "r.json"), "directory " + filepath.Join(dir, "missing") + " does not exist"},
		{filepath.Join(file, "r.json"), file + " is not a directory"},
	} {
		err := Check(tc.path)
		var te *TargetError
		if !errors.As(err, &te) || te.Path != tc.path || err.Error() != tc.want {
			t.Errorf("Check(%s): %v, want a TargetError %q", tc.path, err, tc.want)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Fatalf("Check left files behind: %v", ents)
	}
}

// TestCheckReadOnlyDirectory: a directory that takes no new file is
// refused (not as root, whom permissions do not stop).
func TestCheckReadOnlyDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("a read-only directory takes files here (running as root)")
	}
	err := Check(filepath.Join(dir, "r.json"))
	if err == nil || !strings.Contains(err.Error(), "cannot create a file in "+dir) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("Check in a read-only directory: %v", err)
	}
}

// TestWriteRefusesDirectory: Write does not start on a directory.
func TestWriteRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	called := false
	err := Write(target, func(w io.Writer) error { called = true; return nil }, Options{})
	var te *TargetError
	if !errors.As(err, &te) || called || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("Write to a directory: %v (writer called %v)", err, called)
	}
	assertOnly(t, dir, "out")
}
