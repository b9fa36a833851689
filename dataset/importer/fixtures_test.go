package importer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes data to dir/name (gzip-compressed when name ends in
// .gz), creating parent folders.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, ".gz") {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		data = b.Bytes()
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func le(vals ...any) []byte {
	var b bytes.Buffer
	for _, v := range vals {
		binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes()
}

// npyBytes encodes a C-order .npy v1 file.
func npyBytes(descr string, shape []int64, payload []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	for (10+len(hdr)+1)%64 != 0 {
		hdr += " "
	}
	hdr += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	b.Write(payload)
	return b.Bytes()
}

// sharedFixture writes a 4-node undirected dataset in the shared layout:
// edges 0-1, 1-2, 2-3 (both directions), 2 features, 2 classes.
func sharedFixture(t testing.TB) string {
	dir := filepath.Join(t.TempDir(), "mini")
	files := map[string][]byte{
		"edges.bin":          le([]int32{0, 1, 1, 0, 1, 2, 2, 1, 2, 3, 3, 2}),
		"features.bin":       le([]float32{1, 0, 0, 1, 1, 1, 0, 0}),
		"labels.bin":         le([]int32{0, 1, 1, -1}),
		"train.idx":          le([]int32{0, 1}),
		"val.idx":            le([]int32{2}),
		"test.idx":           le([]int32{}),
		"splits/train_1.idx": le([]int32{2}),
		"splits/val_1.idx":   le([]int32{0}),
		"splits/test_1.idx":  le([]int32{1}),
	}
	meta := map[string]any{
		"name": "Mini", "num_nodes": 4, "num_edges": 6, "feat_dim": 2, "num_classes": 2,
		"directed": false, "extra_field": "ignored",
	}
	fm := map[string]any{}
	for name, data := range files {
		s := sha256.Sum256(data)
		fm[name] = map[string]any{"bytes": len(data), "sha256": hex.EncodeToString(s[:])}
		if strings.HasPrefix(name, "splits/") {
			writeFile(t, dir, name, data) // uncompressed, as in the shared folder
		} else {
			writeFile(t, dir, name+".gz", data)
		}
	}
	meta["files"] = fm
	b, _ := json.Marshal(meta)
	writeFile(t, dir, "meta.json", b)
	return dir
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func nan() float64 { return math.NaN() }
