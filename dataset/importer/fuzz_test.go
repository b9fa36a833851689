package importer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/dataset"
)

func FuzzNPYHeader(f *testing.F) {
	f.Add(npyBytes("<f4", []int64{3, 2}, nil))
	f.Add(npyBytes("<i8", []int64{7}, nil))
	f.Add([]byte("\x93NUMPY\x02\x00\x10\x00\x00\x00{'descr': '<i4'}"))
	f.Add([]byte("\x93NUMPY\x01\x00\x05\x00{'a':"))
	f.Add([]byte("\x93NUMPY\x01\x00\x40\x00{'descr': '|b1', 'fortran_order': True, 'shape': (3L,), }      "))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseNPYHeader("f.npy", b)
		if err != nil {
			return
		}
		if h.DataOff > int64(len(b)) || npyItemSize(h.Descr) == 0 || h.count() < 0 {
			t.Fatalf("accepted inconsistent header %+v", h)
		}
	})
}

// FuzzLoadNPY writes arbitrary bytes as the edge array (and as labels)
// of an npy directory; loading must fail cleanly or give a valid dataset.
func FuzzLoadNPY(f *testing.F) {
	f.Add(npyBytes("<i4", []int64{2, 2}, le([]int32{0, 1, 1, 0})), false)
	f.Add(npyBytes("<i8", []int64{2, 1}, le([]int64{0, 3})), true)
	f.Add(npyBytes("<f8", []int64{2}, le([]float64{1, 0})), true)
	f.Fuzz(func(t *testing.T, b []byte, asLabels bool) {
		if len(b) > 1<<16 {
			return
		}
		dir := t.TempDir()
		edges := b
		if asLabels {
			edges = npyBytes("<i4", []int64{2, 2}, le([]int32{0, 1, 1, 0}))
			os.WriteFile(filepath.Join(dir, "labels.npy"), b, 0o644)
		}
		os.WriteFile(filepath.Join(dir, "edge_index.npy"), edges, 0o644)
		d, err := LoadNPY(dir, Options{Quiet: true})
		if err == nil {
			if err := dataset.Validate(d); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzSNAPLine(f *testing.F) {
	for _, s := range []string{"0 1", "# c", "3\t4\t0.5", "  7,8 ", "1", "-1 2", "99999999999999999999 1", "% x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, skip, col, msg := parseEdgeLine(b)
		if !skip && msg == "" && (e.src < 0 || e.dst < 0 || (e.fields != 2 && e.fields != 3)) {
			t.Fatalf("accepted %+v from %q", e, b)
		}
		if skip && msg != "" {
			t.Fatal("skip with error")
		}
		if msg != "" && (col < 0 || col > len(b) || len(msg) > 200) {
			t.Fatalf("error at column %d of a %d-byte line: %q", col, len(b), msg)
		}
	})
}

// FuzzLoadSNAP parses whole edge-list files.
func FuzzLoadSNAP(f *testing.F) {
	f.Add([]byte("# c\n0 1\n1\t2\n"), false)
	f.Add([]byte("5 1000000000000\n"), true)
	f.Add([]byte("0 1\r\n\r\n2 2 9\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, remap bool) {
		if len(b) > 1<<16 {
			return
		}
		p := filepath.Join(t.TempDir(), "g.txt")
		os.WriteFile(p, b, 0o644)
		d, err := LoadSNAP(p, Options{Quiet: true, RemapIDs: remap, limitNodes: fuzzNodes})
		if err != nil {
			return
		}
		if err := dataset.Validate(d); err != nil {
			t.Fatal(err)
		}
		// Without remapping, IDs up to ~1<<31 could make huge (but legal)
		// graphs; the size is bounded by the largest ID, never by a count
		// the input merely declares.
	})
}

// FuzzOGB puts arbitrary text into one file of a small OGB layout.
func FuzzOGB(f *testing.F) {
	f.Add(uint8(0), []byte("0,1\n1,2\n"))
	f.Add(uint8(1), []byte("3\n"))
	f.Add(uint8(2), []byte("1,2\n3,4\n5,6e3\n"))
	f.Add(uint8(3), []byte("0\nnan\n2.0\n"))
	f.Add(uint8(4), []byte("2\n0\n"))
	files := []string{"raw/edge.csv", "raw/num-node-list.csv", "raw/node-feat.csv", "raw/node-label.csv", "split/s/train.csv"}
	f.Fuzz(func(t *testing.T, sel uint8, b []byte) {
		if len(b) > 1<<16 || bytes.Count(b, []byte("\n")) > 1<<12 {
			return
		}
		dir := t.TempDir()
		content := map[string][]byte{
			"raw/edge.csv":          []byte("0,1\n1,2\n"),
			"raw/num-node-list.csv": []byte("3\n"),
			"raw/node-feat.csv":     []byte("1,2\n3,4\n5,6\n"),
			"raw/node-label.csv":    []byte("0\n1\n0\n"),
			"split/s/train.csv":     []byte("0\n"),
			"split/s/valid.csv":     []byte("1\n"),
			"split/s/test.csv":      []byte("2\n"),
		}
		content[files[int(sel)%len(files)]] = b
		for k, v := range content {
			p := filepath.Join(dir, k)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, v, 0o644)
		}
		d, err := LoadOGB(dir, Options{Quiet: true, limitNodes: fuzzNodes})
		if err != nil {
			return
		}
		if err := dataset.Validate(d); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzNodes caps the node count the fuzz targets accept (Options
// .limitNodes): a legal but large stated count (up to 2^24 isolated nodes
// beyond the edges) would make one input cost seconds.
const fuzzNodes = 1 << 12

// FuzzSharedMeta fuzzes meta.json of a valid shared-layout dataset.
func FuzzSharedMeta(f *testing.F) {
	src := sharedFixture(f)
	meta, err := os.ReadFile(filepath.Join(src, "meta.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(meta)
	f.Add([]byte(`{"num_nodes": 4, "num_edges": 1e300}`))
	// The array files never change and LoadShared only reads them: each
	// input just replaces meta.json in this process's copy (a process
	// runs one input at a time).
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(src, "meta.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := LoadShared(src, Options{Quiet: true, limitNodes: fuzzNodes})
		if err != nil {
			return
		}
		if err := dataset.Validate(d); err != nil {
			t.Fatal(err)
		}
	})
}
