package npy

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFloat32(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.npy")
	data := []float32{1, -2.5, float32(math.Pi), 0, 7, 8}
	if err := WriteFloat32(path, 2, 3, data); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Descr != "<f4" || h.FortranOrder || len(h.Shape) != 2 || h.Shape[0] != 2 || h.Shape[1] != 3 {
		t.Fatalf("header %+v", h)
	}
	if h.DataOffset%64 != 0 {
		t.Errorf("data at byte %d, NumPy aligns it to 64", h.DataOffset)
	}
	if !strings.HasSuffix(string(b[:h.DataOffset]), "\n") {
		t.Errorf("header does not end with a newline")
	}
	for i, v := range data {
		got := math.Float32frombits(binary.LittleEndian.Uint32(b[h.DataOffset+int64(4*i):]))
		if got != v {
			t.Fatalf("value %d is %v, want %v", i, got, v)
		}
	}
	if err := WriteFloat32(path, 4, 3, data); err == nil {
		t.Fatal("a wrong shape was written")
	}
}

// vector is a .npy file of the int vector v as descr ('<i4' or '<i8').
func vector(descr string, shape []int, v []int64) []byte {
	b := header(descr, shape)
	for _, x := range v {
		if descr == "<i4" {
			b = binary.LittleEndian.AppendUint32(b, uint32(int32(x)))
		} else {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
	}
	return b
}

func TestParseInts(t *testing.T) {
	for _, descr := range []string{"<i4", "<i8"} {
		got, err := ParseInts(vector(descr, []int{3}, []int64{5, -1, 2707}))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0] != 5 || got[1] != -1 || got[2] != 2707 {
			t.Fatalf("%s: %v", descr, got)
		}
	}
	if got, err := ParseInts(vector("<i8", []int{2, 1}, []int64{1, 2})); err != nil || len(got) != 2 {
		t.Fatalf("(2, 1): %v %v", got, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"float", vector("<f4", []int{1}, []int64{0}), `dtype "<f4"`},
		{"matrix", vector("<i4", []int{2, 2}, []int64{1, 2, 3, 4}), "want a vector"},
		{"short", vector("<i8", []int{3}, []int64{1, 2}), "needs 24 bytes, the file has 16"},
		{"huge", vector("<i8", []int{1 << 50}, nil), "needs"},
		{"magic", []byte("hello world"), "not a .npy file"},
		{"version", append([]byte(Magic+"\x09\x00"), 0, 0), "format version 9.0"},
	} {
		_, err := ParseInts(tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseInts: no input panics; an accepted one has as many values
// as its bytes hold.
func FuzzParseInts(f *testing.F) {
	f.Add(vector("<i4", []int{3}, []int64{1, 2, 3}))
	f.Add(vector("<i8", []int{2, 1}, []int64{7, 8}))
	f.Add([]byte(Magic + "\x01\x00\x10\x00{'descr': '<i8'}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseInts(b)
		if err != nil {
			return
		}
		if len(v) > len(b)/4 {
			t.Fatalf("%d values from %d bytes", len(v), len(b))
		}
	})
}

// FuzzParseIntMatrix: no input panics; an accepted one holds whole rows
// of two values, no more than its bytes hold.
func FuzzParseIntMatrix(f *testing.F) {
	f.Add(vector("<i8", []int{2, 2}, []int64{1, 2, 3, 4}))
	f.Add(vector("<i4", []int{1, 2}, []int64{5, 6}))
	f.Add(vector("<i8", []int{3}, []int64{1, 2, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseIntMatrix(b, 2)
		if err != nil {
			return
		}
		if len(v)%2 != 0 || len(v) > len(b)/4 {
			t.Fatalf("%d values from %d bytes", len(v), len(b))
		}
	})
}

// TestWriteRawEqualsEncoded: on this host, the raw bytes of float32 and
// int32 values are their little-endian encoding, over several blocks
// and a partial last one (the encoding path is the one big-endian hosts
// take).
func TestWriteRawEqualsEncoded(t *testing.T) {
	if !littleEndian {
		t.Skip("big-endian host: only the encoding path runs")
	}
	const n, block = 3*1000 + 7, 1000
	f := make([]float32, n)
	ints := make([]int32, n)
	for i := range f {
		f[i] = float32(i)*-0.37 + 1e-3
		ints[i] = int32(i*7919 - n)
	}
	var raw, enc bytes.Buffer
	if err := writeRaw(&raw, f, block); err != nil {
		t.Fatal(err)
	}
	if err := writeEncoded(&enc, f, math.Float32bits, block); err != nil {
		t.Fatal(err)
	}
	if raw.Len() != 4*n || !bytes.Equal(raw.Bytes(), enc.Bytes()) {
		t.Fatalf("float32: %d raw bytes, %d encoded, equal %v", raw.Len(), enc.Len(), bytes.Equal(raw.Bytes(), enc.Bytes()))
	}
	for i := 0; i < n; i += 997 { // the encoding itself, against the values
		if got := math.Float32frombits(binary.LittleEndian.Uint32(enc.Bytes()[4*i:])); got != f[i] {
			t.Fatalf("value %d is %v, want %v", i, got, f[i])
		}
	}
	raw.Reset()
	enc.Reset()
	if err := writeRaw(&raw, ints, block); err != nil {
		t.Fatal(err)
	}
	if err := writeEncoded(&enc, ints, func(v int32) uint32 { return uint32(v) }, block); err != nil {
		t.Fatal(err)
	}
	if raw.Len() != 4*n || !bytes.Equal(raw.Bytes(), enc.Bytes()) {
		t.Fatalf("int32: %d raw bytes, %d encoded, equal %v", raw.Len(), enc.Len(), bytes.Equal(raw.Bytes(), enc.Bytes()))
	}
}

// BenchmarkWriteWords: 256 MiB of float32 values to io.Discard, as
// their bytes (little-endian hosts) or encoded value by value (what
// every host did before): the cost of writing an output, the disk aside.
func BenchmarkWriteWords(b *testing.B) {
	data := make([]float32, 64<<20)
	for i := range data {
		data[i] = float32(i)
	}
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(int64(4 * len(data)))
		if !littleEndian {
			b.Skip("big-endian host")
		}
		for b.Loop() {
			if err := writeRaw(io.Discard, data, rawBlock); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) {
		b.SetBytes(int64(4 * len(data)))
		for b.Loop() {
			if err := writeEncoded(io.Discard, data, math.Float32bits, encodeBlock); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWriteBlocks: values across several write blocks (and a partial
// last one) come back in order, float32 and int32.
func TestWriteBlocks(t *testing.T) {
	const n = 2<<18 + 5
	dir := t.TempDir()
	f := make([]float32, n)
	ints := make([]int32, n)
	for i := range f {
		f[i] = float32(i) * -0.5
		ints[i] = int32(i*7 - n)
	}
	if err := WriteFloat32(filepath.Join(dir, "f.npy"), n, 1, f); err != nil {
		t.Fatal(err)
	}
	if err := WriteInt32(filepath.Join(dir, "i.npy"), ints); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "f.npy"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(len(b)) - h.DataOffset; got != 4*n {
		t.Fatalf("%d data bytes, want %d", got, 4*n)
	}
	for i, v := range f {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[h.DataOffset+int64(4*i):])); got != v {
			t.Fatalf("float %d is %v, want %v", i, got, v)
		}
	}
	b, err = os.ReadFile(filepath.Join(dir, "i.npy"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseInts(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d ints, want %d", len(got), n)
	}
	for i, v := range ints {
		if got[i] != int64(v) {
			t.Fatalf("int %d is %d, want %d", i, got[i], v)
		}
	}
}
