package dataset

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// v1Golden is a version 1 dataset (tiny()) written by dataset.Write before
// format version 2 (typed datasets) existed. Its bytes are committed and
// never regenerated: they are what users have on disk.
const v1Golden = "testdata/v1-tiny"

// TestV1GoldenOpens proves that version 1 datasets keep working unchanged:
// the committed directory opens (checksums, structure) with and without
// mmap to exactly tiny(), its summary says version 1, and its fingerprint
// is the one recorded when it was written.
func TestV1GoldenOpens(t *testing.T) {
	for _, opts := range []OpenOptions{{Quiet: true}, {Quiet: true, NoMmap: true}} {
		d, err := Open(v1Golden, opts)
		if err != nil {
			t.Fatalf("Open(%+v): %v", opts, err)
		}
		sameDataset(t, d, tiny())
		if fp, want := d.Fingerprint(), tiny().Fingerprint(); fp != want {
			t.Errorf("fingerprint %s, want %s", fp, want)
		}
		d.Close()
	}
	s, err := Info(v1Golden)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != 1 || s.NumNodes != 5 || s.NumEdges != 8 {
		t.Fatalf("summary %+v", s)
	}
	if v, err := ManifestVersion(v1Golden); err != nil || v != 1 {
		t.Fatalf("ManifestVersion = %d, %v; want 1", v, err)
	}
}

// TestV1WriteUnchanged checks that Write still produces the committed
// version 1 bytes, file for file.
func TestV1WriteUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v1-tiny")
	if err := Write(dir, tiny(), WriteOptions{Quiet: true, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(v1Golden)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ents) {
		t.Fatalf("Write made %d files, the golden has %d", len(got), len(ents))
	}
	for _, e := range ents {
		want, err := os.ReadFile(filepath.Join(v1Golden, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs from the version 1 golden", e.Name())
		}
	}
}
