package regfile_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/internal/testkit"
)

func TestOpenRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "manifest.json")
	testkit.Mkfifo(t, p)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p, link} {
		testkit.NoBlock(t, "regfile.Open", func() {
			f, _, err := regfile.Open(path)
			if err == nil {
				f.Close()
				t.Errorf("Open(%s) of a FIFO succeeded", path)
				return
			}
			var pe *fs.PathError
			if !errors.Is(err, regfile.ErrNotRegular) || !errors.As(err, &pe) || pe.Path != path ||
				!strings.Contains(err.Error(), "named pipe") {
				t.Errorf("Open(%s) = %v, want a PathError naming the path and a named pipe", path, err)
			}
		}, p)
		testkit.NoBlock(t, "regfile.ReadFile", func() {
			if _, err := regfile.ReadFile(path, 100); !errors.Is(err, regfile.ErrNotRegular) {
				t.Errorf("ReadFile(%s) = %v, want ErrNotRegular", path, err)
			}
		}, p)
	}
}

func TestOpenRefusesOthers(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Linux refuses to open a socket (ENXIO); other systems may open it.
	if _, _, err := regfile.Open(sock); err == nil {
		t.Errorf("Open of a socket succeeded")
	}
	for path, kind := range map[string]string{dir: "directory", os.DevNull: "character device"} {
		_, _, err := regfile.Open(path)
		if !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), kind) {
			t.Errorf("Open(%s) = %v, want a refusal naming a %s", path, err, kind)
		}
	}
}

func TestReadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := regfile.ReadFile(p, 5); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	var tl *regfile.TooLargeError
	if _, err := regfile.ReadFile(p, 4); !errors.As(err, &tl) || tl.Limit != 4 {
		t.Fatalf("ReadFile over the limit = %v", err)
	}
	if _, err := regfile.ReadFile(filepath.Join(t.TempDir(), "none"), 4); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
