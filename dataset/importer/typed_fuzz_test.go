package importer

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/dataset"
)

// FuzzOGBHetero puts arbitrary text into one file of the ogbn-mag-shaped
// fixture. LoadOGBHetero must never panic, and what it accepts must be a
// valid typed dataset.
func FuzzOGBHetero(f *testing.F) {
	files := []string{
		"raw/num-node-dict.csv.gz", "raw/triplet-type-list.csv.gz",
		"raw/relations/author___writes___paper/edge.csv.gz", "raw/relations/paper___cites___paper/num-edge-list.csv.gz",
		"raw/node-feat/paper/node-feat.csv.gz", "raw/nodetype-has-label.csv.gz", "raw/node-label/paper/node-label.csv.gz",
		"split/time/paper/train.csv.gz",
	}
	f.Add(uint8(0), []byte("author,field_of_study,institution,paper\n3,2,2,4\n"))
	f.Add(uint8(0), []byte("author,field_of_study,institution,paper\n3,2,2,40000000\n"))
	f.Add(uint8(1), []byte("author,writes,paper\n"))
	f.Add(uint8(2), []byte("0,0\n2,3\n-1,2\n"))
	f.Add(uint8(3), []byte("3\n"))
	f.Add(uint8(4), []byte("1,2\n3,4\n5,nan\n7,8\n"))
	f.Add(uint8(5), []byte("author,field_of_study,institution,paper\nTrue,False,False,True\n"))
	f.Add(uint8(6), []byte("0\n1\n2\n3.0\n"))
	f.Add(uint8(7), []byte("0\n0\n"))
	f.Fuzz(func(t *testing.T, sel uint8, b []byte) {
		if len(b) > 1<<16 || bytes.Count(b, []byte("\n")) > 1<<12 {
			return
		}
		d := copyTree(t, ogbMagTiny)
		writeFile(t, d, files[int(sel)%len(files)], b)
		h, err := LoadOGBHetero(d, Options{Quiet: true, limitNodes: fuzzNodes})
		if err != nil {
			return
		}
		if err := dataset.ValidateHetero(h); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzTypedNPY replaces one .npy file of a small typed npy layout with
// arbitrary bytes. LoadTypedNPY must never panic, and what it accepts
// must be a valid typed dataset.
func FuzzTypedNPY(f *testing.F) {
	h := fixtureHetero(f)
	files := []string{"nodes/author/x.npy", "nodes/field/num_nodes.npy", "nodes/paper/y.npy", "nodes/paper/train_idx.npy",
		"edges/author___writes___paper/edge_index.npy", "edges/author___writes___paper/weights.npy"}
	f.Add(uint8(1), npyBytes("<i8", []int64{}, le(int64(1<<40))))
	f.Add(uint8(4), npyBytes("<i4", []int64{2, 2}, le([]int32{0, 1, 5000, 0})))
	f.Add(uint8(5), npyBytes("<f4", []int64{1}, le(float32(2))))
	f.Add(uint8(2), npyBytes("<f8", []int64{3}, le([]float64{0, nan(), 1.5})))
	f.Add(uint8(0), []byte("\x93NUMPY\x01\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, sel uint8, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		dir := filepath.Join(t.TempDir(), "npy")
		writeTypedNPY(t, dir, h)
		writeFile(t, dir, files[int(sel)%len(files)], b)
		got, err := LoadTypedNPY(dir, Options{Quiet: true, limitNodes: fuzzNodes})
		if err != nil {
			return
		}
		if err := dataset.ValidateHetero(got); err != nil {
			t.Fatal(err)
		}
	})
}
