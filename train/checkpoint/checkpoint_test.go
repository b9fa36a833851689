package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
)

func sample() *File {
	return &File{
		Meta: []byte(`{"epoch":3,"batch":7}`),
		Tensors: []Tensor{
			{Name: "param/0", Data: []float32{1, -2.5, float32(math.Inf(1)), 0, float32(math.SmallestNonzeroFloat32)}},
			{Name: "adam/m/0", Data: []float32{}},
			{Name: "adam/v/0", Data: []float32{float32(math.NaN()), 3}},
		},
	}
}

func encode(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// reseal recomputes the checksum after a deliberate edit, so the test
// reaches the field checks behind it.
func reseal(data []byte) {
	body := data[:len(data)-4]
	binary.LittleEndian.PutUint32(data[len(body):], crc32.Checksum(body, castagnoli))
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	got, err := Decode("mem", encode(t, in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Meta) != string(in.Meta) {
		t.Fatalf("meta = %q, want %q", got.Meta, in.Meta)
	}
	if len(got.Tensors) != len(in.Tensors) {
		t.Fatalf("%d tensors, want %d", len(got.Tensors), len(in.Tensors))
	}
	for i := range in.Tensors {
		if got.Tensors[i].Name != in.Tensors[i].Name || !sameBits(got.Tensors[i].Data, in.Tensors[i].Data) {
			t.Fatalf("tensor %d = %v %v, want %v %v", i, got.Tensors[i].Name, got.Tensors[i].Data, in.Tensors[i].Name, in.Tensors[i].Data)
		}
	}
	if d := got.Tensor("adam/v/0"); len(d) != 2 || d[1] != 3 {
		t.Fatalf("Tensor lookup = %v", d)
	}
	if got.Tensor("missing") != nil {
		t.Fatal("lookup of a missing tensor returned data")
	}
}

func TestLayout(t *testing.T) {
	data := encode(t, &File{Meta: []byte("{}"), Tensors: []Tensor{{Name: "w", Data: []float32{1.5}}}})
	want := []byte("STRATACK")
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = binary.LittleEndian.AppendUint32(want, 0)
	want = binary.LittleEndian.AppendUint32(want, 2)
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = append(want, "{}"...)
	want = binary.LittleEndian.AppendUint16(want, 1)
	want = append(want, 'w', 1)
	want = binary.LittleEndian.AppendUint64(want, 1)
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(1.5))
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(data, want) {
		t.Fatalf("layout\n got %x\nwant %x", data, want)
	}
}

func TestEveryBitFlipIsDetected(t *testing.T) {
	data := encode(t, sample())
	for i := range data {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(data)
			c[i] ^= 1 << bit
			if _, err := Decode("flip", c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip of byte %d bit %d: err = %v, want ErrCorrupt", i, bit, err)
			}
		}
	}
}

func TestEveryTruncationIsDetected(t *testing.T) {
	data := encode(t, sample())
	for n := 0; n < len(data); n++ {
		_, err := Decode("trunc", data[:n])
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Path != "trunc" {
			t.Fatalf("truncation to %d bytes: err = %v, want *FormatError", n, err)
		}
	}
	if _, err := Decode("long", append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

func TestFieldErrorsNameOffset(t *testing.T) {
	base := encode(t, sample())
	metaLen := len(sample().Meta)
	firstTensor := headerSize + metaLen
	cases := []struct {
		name    string
		edit    func([]byte)
		reseal  bool
		offset  int64
		message string
	}{
		{"magic", func(d []byte) { d[0] = 'X' }, false, 0, "bad magic"},
		{"version", func(d []byte) { binary.LittleEndian.PutUint32(d[8:], 2) }, false, 8, "unsupported format version 2"},
		{"checksum", func(d []byte) { d[30] ^= 1 }, false, int64(len(base) - 4), "checksum mismatch"},
		{"flags", func(d []byte) { binary.LittleEndian.PutUint32(d[12:], 4) }, true, 12, "unknown flags"},
		{"huge meta", func(d []byte) { binary.LittleEndian.PutUint32(d[16:], math.MaxUint32) }, true, 16, "metadata length"},
		{"meta past end", func(d []byte) { binary.LittleEndian.PutUint32(d[16:], uint32(len(d))) }, true, 16, "runs past the end"},
		{"huge count", func(d []byte) { binary.LittleEndian.PutUint32(d[20:], math.MaxUint32) }, true, 20, "tensor count"},
		{"zero name", func(d []byte) { binary.LittleEndian.PutUint16(d[firstTensor:], 0) }, true, int64(firstTensor), "name length 0"},
		{"dtype", func(d []byte) { d[firstTensor+2+7] = 9 }, true, int64(firstTensor + 9), "unknown dtype 9"},
		{"huge elements", func(d []byte) { binary.LittleEndian.PutUint64(d[firstTensor+10:], math.MaxUint64) }, true, int64(firstTensor + 10), "run past the end"},
		{"duplicate", func(d []byte) {
			// Rename the third tensor "adam/v/0" to "adam/m/0".
			i := bytes.LastIndex(d, []byte("adam/v/0"))
			d[i+5] = 'm'
		}, true, -1, "duplicate name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := bytes.Clone(base)
			tc.edit(d)
			if tc.reseal {
				reseal(d)
			}
			_, err := Decode("ck", d)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want *FormatError", err)
			}
			if !strings.Contains(fe.Msg, tc.message) || (tc.offset >= 0 && fe.Offset != tc.offset) {
				t.Fatalf("err = %v, want offset %d and %q", err, tc.offset, tc.message)
			}
			if !strings.Contains(err.Error(), "ck") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	for _, f := range []*File{
		{Tensors: []Tensor{{Name: ""}}},
		{Tensors: []Tensor{{Name: "a"}, {Name: "a"}}},
		{Tensors: []Tensor{{Name: "\xff"}}},
		{Tensors: []Tensor{{Name: strings.Repeat("n", MaxName+1)}}},
	} {
		if err := Encode(&bytes.Buffer{}, f); err == nil {
			t.Fatalf("Encode accepted %+v", f.Tensors)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.strata")
	first := sample()
	if err := WriteFile(path, first); err != nil {
		t.Fatal(err)
	}
	second := &File{Meta: []byte(`{"epoch":4}`), Tensors: []Tensor{{Name: "param/0", Data: []float32{9}}}}

	// A crash after the temporary file is written but before the rename
	// leaves the first checkpoint in place and no temporary file behind.
	crash := errors.New("simulated crash")
	testHookBeforeRename = func(tmp string) error {
		if _, err := os.Stat(tmp); err != nil {
			t.Errorf("temporary file missing before rename: %v", err)
		}
		if filepath.Dir(tmp) != dir {
			t.Errorf("temporary file %s not in %s", tmp, dir)
		}
		return crash
	}
	err := WriteFile(path, second)
	testHookBeforeRename = nil
	if !errors.Is(err, crash) {
		t.Fatalf("err = %v, want the simulated crash", err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Meta) != string(first.Meta) {
		t.Fatalf("after a failed write meta = %s, want the previous %s", got.Meta, first.Meta)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after a failed write, want 1", len(entries))
	}

	if err := WriteFile(path, second); err != nil {
		t.Fatal(err)
	}
	got, err = ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Meta) != `{"epoch":4}` || got.Tensor("param/0")[0] != 9 {
		t.Fatalf("read back %s %v", got.Meta, got.Tensors)
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFile(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
	if _, err := ReadFile(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("directory: err = %v", err)
	}
	// A FIFO is refused at once (os.Open would block until a writer came).
	fifo := filepath.Join(dir, "fifo")
	testkit.Mkfifo(t, fifo)
	testkit.NoBlock(t, "checkpoint.ReadFile", func() {
		if _, err := ReadFile(fifo); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("FIFO: err = %v", err)
		}
	}, fifo)
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("STRATACK but not really a checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(bad)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Path != bad {
		t.Fatalf("err = %v, want *FormatError naming %s", err, bad)
	}
}

func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	_ = Encode(&buf, sample())
	f.Add(buf.Bytes())
	f.Add([]byte("STRATACK"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes must encode back to the same bytes.
		var out bytes.Buffer
		if err := Encode(&out, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatal("decode/encode round trip changed the bytes")
		}
	})
}
