package partition

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/strata-gnn/strata/partition/book"
)

func sampleSaved(t testing.TB) *Saved {
	parts := []int32{1, 0, 1, 2, 0, 1, 1, 2, 0, 0}
	r, err := Renumber(parts, 3)
	if err != nil {
		t.Fatal(err)
	}
	return &Saved{Book: r.Book, NewToOld: r.NewToOld, OldToNew: r.OldToNew, NCon: 2,
		PartWeights: []int64{4, 1, 4, 2, 2, 0},
		Meta: Meta{Dataset: "toy", Method: Multilevel, Seed: 9, Imbalance: 1.03,
			Constraints: []string{"nodes", "train"}, Balance: []float64{1.2, 1.33}, Edges: 12, EdgeCut: 3, Millis: 1}}
}

func TestFileRoundTrip(t *testing.T) {
	s := sampleSaved(t)
	path := filepath.Join(t.TempDir(), FileName)
	if err := WriteFile(path, s, false); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries", len(ents))
	}
	// Overwriting replaces the file.
	s.Meta.Seed = 10
	if err := WriteFile(path, s, true); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || got.Meta.Seed != 10 {
		t.Fatalf("after overwrite: %v %v", got, err)
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	s := sampleSaved(t)
	s.NewToOld[0] = s.NewToOld[1]
	if _, err := s.Encode(); !errors.Is(err, ErrInput) {
		t.Errorf("non-permutation: %v", err)
	}
	s = sampleSaved(t)
	s.PartWeights = s.PartWeights[:2]
	if _, err := s.Encode(); !errors.Is(err, ErrInput) {
		t.Errorf("part weights: %v", err)
	}
}

// TestCorruption flips every bit of a small file and truncates it at every
// length: each damaged file must be rejected with a located ErrCorruption.
func TestCorruption(t *testing.T) {
	b, err := sampleSaved(t).Encode()
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		for bit := 0; bit < 8; bit++ {
			c := append([]byte(nil), b...)
			c[i] ^= 1 << bit
			_, err := Parse("p.bin", c)
			var fe *FormatError
			if !errors.Is(err, ErrCorruption) || !errors.As(err, &fe) || fe.Path != "p.bin" {
				t.Fatalf("flip byte %d bit %d: err = %v", i, bit, err)
			}
		}
	}
	for n := 0; n < len(b); n++ {
		if _, err := Parse("p.bin", b[:n]); !errors.Is(err, ErrCorruption) {
			t.Fatalf("truncated to %d: err = %v", n, err)
		}
	}
	if _, err := Parse("p.bin", append(b, 0)); !errors.Is(err, ErrCorruption) {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

// reseal recomputes the header and section checksums of b, whose section
// sizes are those of the file geom, so tests can plant semantic errors
// behind valid checksums.
func reseal(b, geom []byte) []byte {
	le := binary.LittleEndian
	le.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	k, ncon, n := int64(le.Uint32(geom[16:])), int64(le.Uint32(geom[20:])), int64(le.Uint32(geom[24:]))
	off := int64(headerSize + 4)
	for _, size := range []int64{int64(le.Uint32(b[headerSize:])), (k + 1) * 8, k * ncon * 8, n * 4} {
		le.PutUint32(b[off+size:], crc32.Checksum(b[off:off+size], castagnoli))
		off += size + 4
	}
	return b
}

func TestSemanticErrors(t *testing.T) {
	good, err := sampleSaved(t).Encode()
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	metaLen := int64(le.Uint32(good[headerSize:]))
	offAt := int64(headerSize+4) + metaLen + 4
	wAt := offAt + 4*8 + 4
	pAt := wAt + 6*8 + 4
	for _, c := range []struct {
		name    string
		edit    func(b []byte)
		wantOff int64
		version bool
	}{
		{"version", func(b []byte) { le.PutUint32(b[8:], 2) }, 8, true},
		{"flags", func(b []byte) { le.PutUint32(b[12:], 1) }, 12, false},
		{"k=0", func(b []byte) { le.PutUint32(b[16:], 0) }, 16, false},
		{"ncon", func(b []byte) { le.PutUint32(b[20:], 99) }, 20, false},
		{"offsets[0]", func(b []byte) { le.PutUint64(b[offAt:], 1) }, offAt, false},
		{"offsets decrease", func(b []byte) { le.PutUint64(b[offAt+16:], 1) }, offAt + 16, false},
		{"offsets end", func(b []byte) { le.PutUint64(b[offAt+24:], 9) }, offAt + 24, false},
		{"weight<0", func(b []byte) { le.PutUint64(b[wAt+8:], ^uint64(0)) }, wAt + 8, false},
		{"id range", func(b []byte) { le.PutUint32(b[pAt+4:], 10) }, pAt + 4, false},
		{"duplicate id", func(b []byte) { copy(b[pAt+8:pAt+12], b[pAt:pAt+4]) }, pAt + 8, false},
	} {
		b := append([]byte(nil), good...)
		c.edit(b)
		_, err := Parse("p.bin", reseal(b, good))
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: err = %v, want a FormatError", c.name, err)
			continue
		}
		if c.name != "k=0" && c.name != "ncon" && fe.Off != c.wantOff {
			t.Errorf("%s: offset %d, want %d (%v)", c.name, fe.Off, c.wantOff, err)
		}
		if errors.Is(err, ErrUnsupportedVersion) != c.version {
			t.Errorf("%s: ErrUnsupportedVersion = %v", c.name, !c.version)
		}
	}
	// Unknown metadata fields are rejected.
	s := sampleSaved(t)
	b, _ := s.Encode()
	i := int64(headerSize + 4)
	copy(b[i:], []byte(`{"zzzzzzz":"toy"`)) // overwrite `{"dataset":"toy"`
	if _, err := Parse("p.bin", reseal(b, good)); !errors.Is(err, ErrCorruption) {
		t.Errorf("unknown meta field: %v", err)
	}
	// A huge declared metadata length is refused before allocating.
	b = append([]byte(nil), good...)
	le.PutUint32(b[headerSize:], 1<<30)
	if _, err := Parse("p.bin", b); !errors.Is(err, ErrCorruption) {
		t.Errorf("huge meta length: %v", err)
	}
	// ReadFile checks the size against the header before reading.
	path := filepath.Join(t.TempDir(), "x.bin")
	os.WriteFile(path, good[:40], 0o644)
	if _, err := ReadFile(path); !errors.Is(err, ErrCorruption) {
		t.Errorf("short file: %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, ErrCorruption) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	good, err := sampleSaved(f).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:headerSize+4])
	one, _ := (&Saved{Book: mustBook(f, []int64{0, 1}), NewToOld: []int32{0}, OldToNew: []int32{0}, NCon: 1, PartWeights: []int64{1}}).Encode()
	f.Add(one)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse("fuzz.bin", b)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error does not wrap ErrCorruption: %v", err)
			}
			return
		}
		// Whatever parses must be a consistent partition that encodes back
		// to a file that parses to the same value.
		if s.Book.NumNodes() != int64(len(s.NewToOld)) {
			t.Fatal("book and permutation disagree")
		}
		for u, v := range s.NewToOld {
			if s.OldToNew[v] != int32(u) {
				t.Fatal("maps not inverse")
			}
		}
		b2, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Parse("fuzz.bin", b2)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("re-encoding: %v", err)
		}
	})
}

func mustBook(t testing.TB, off []int64) *book.Book {
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
