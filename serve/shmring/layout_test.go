package shmring

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleTensors() []Tensor {
	return []Tensor{
		{Name: "n_id", DType: DTypeInt64, Shape: []int64{5}},
		{Name: "edge_index", DType: DTypeInt64, Shape: []int64{2, 7}},
		{Name: "x", DType: DTypeFloat32, Shape: []int64{5, 3}},
		{Name: "empty", DType: DTypeInt32, Shape: []int64{0}},
	}
}

// slotWith returns a slot of size bytes holding sampleTensors for seq.
func slotWith(t testing.TB, size int, seq uint64) ([]byte, []Tensor, int64) {
	t.Helper()
	ts := sampleTensors()
	used, err := Place(ts)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if err := WriteSlotHeader(b, seq, used, ts); err != nil {
		t.Fatal(err)
	}
	return b, ts, used
}

func TestPlace(t *testing.T) {
	ts := sampleTensors()
	used, err := Place(ts)
	if err != nil {
		t.Fatal(err)
	}
	// 1024 | n_id 40 -> 1088 | edge_index 112 -> 1216 | x 60 -> 1280 | empty 0 at 1280.
	wantOff := []int64{1024, 1088, 1216, 1280}
	wantBytes := []int64{40, 112, 60, 0}
	for i, tt := range ts {
		if tt.Offset != wantOff[i] || tt.Bytes != wantBytes[i] {
			t.Errorf("%s at %d (+%d), want %d (+%d)", tt.Name, tt.Offset, tt.Bytes, wantOff[i], wantBytes[i])
		}
	}
	if used != 1280 {
		t.Errorf("used %d, want 1280", used)
	}
	for _, bad := range [][]Tensor{
		{{Name: "", DType: DTypeInt32}},
		{{Name: "a name that is too long", DType: DTypeInt32}},
		{{Name: "x", DType: 9}},
		{{Name: "x", DType: DTypeInt32, Shape: []int64{-1}}},
		{{Name: "x", DType: DTypeInt32, Shape: []int64{1, 1, 1, 1, 1}}},
		{{Name: "x", DType: DTypeInt64, Shape: []int64{1 << 30, 1 << 30}}},
		make([]Tensor, MaxTensors+1),
	} {
		if _, err := Place(bad); err == nil {
			t.Errorf("Place(%v) accepted", bad)
		}
	}
}

func TestSlotHeaderRoundTrip(t *testing.T) {
	b, ts, used := slotWith(t, 8192, 42)
	h, err := ParseSlotHeader(b, 8192, 42, "slot 0")
	if err != nil {
		t.Fatal(err)
	}
	if h.Sequence != 42 || h.Used != used || !reflect.DeepEqual(h.Tensors, ts) {
		t.Fatalf("parsed %+v, wrote %+v (used %d)", h, ts, used)
	}
	if _, err := ParseSlotHeader(b, 8192, 43, "slot 0"); err == nil || !strings.Contains(err.Error(), "holds batch 42") {
		t.Fatalf("another sequence: %v", err)
	}
	if _, err := ParseSlotHeader(b, 1200, 42, "slot 0"); err == nil || !strings.Contains(err.Error(), "bytes used") {
		t.Fatalf("a slot smaller than used: %v", err)
	}
}

// setCRC rewrites the checksum after a deliberate change, so that the
// checks behind it are reached.
func setCRC(b []byte) {
	count := binary.LittleEndian.Uint32(b[12:])
	if count > MaxTensors {
		return
	}
	binary.LittleEndian.PutUint32(b[36:], slotCRC(b, int(count)))
}

func TestSlotHeaderRefusals(t *testing.T) {
	le := binary.LittleEndian
	e := func(i, off int) int { return tableOff + i*EntryBytes + off }
	for _, c := range []struct {
		name   string
		change func(b []byte)
		fixCRC bool
		want   string
	}{
		{"magic", func(b []byte) { b[0] = 'X' }, false, "magic"},
		{"flipped bit", func(b []byte) { b[e(1, 30)] ^= 4 }, false, "checksum"},
		{"version", func(b []byte) { le.PutUint32(b[8:], 2) }, true, "version 2"},
		{"count", func(b []byte) { le.PutUint32(b[12:], 9) }, false, "9 tensors"},
		{"used too small", func(b []byte) { le.PutUint64(b[24:], 10) }, true, "bytes used"},
		{"name unpadded", func(b []byte) { b[e(0, 15)] = 'z' }, true, "NUL-padded"},
		{"name repeats", func(b []byte) { copy(b[e(1, 0):e(1, 16)], "n_id\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00") }, true, "repeats"},
		{"name control", func(b []byte) { b[e(0, 0)] = '\n' }, true, "printable"},
		{"dtype", func(b []byte) { le.PutUint32(b[e(2, 16):], 7) }, true, "unknown dtype"},
		{"rank", func(b []byte) { le.PutUint32(b[e(2, 20):], 5) }, true, "rank 5"},
		{"unused dim", func(b []byte) { le.PutUint64(b[e(0, 32):], 3) }, true, "unused dimension"},
		{"negative dim", func(b []byte) { le.PutUint64(b[e(2, 24):], ^uint64(0)) }, true, "< 0"},
		{"huge dims", func(b []byte) {
			le.PutUint64(b[e(2, 24):], 1<<40)
			le.PutUint64(b[e(2, 32):], 1<<40)
		}, true, "over"},
		{"bytes", func(b []byte) { le.PutUint64(b[e(2, 64):], 61) }, true, "needs 60"},
		{"misaligned", func(b []byte) { le.PutUint64(b[e(1, 56):], 1090) }, true, "not aligned"},
		{"overlap", func(b []byte) { le.PutUint64(b[e(1, 56):], 1024) }, true, "overlapping"},
		{"in header", func(b []byte) { le.PutUint64(b[e(0, 56):], 64) }, true, "overlapping"},
		{"past used", func(b []byte) { le.PutUint64(b[e(2, 56):], 1280) }, true, "past"},
		{"offset wraps", func(b []byte) { le.PutUint64(b[e(2, 56):], ^uint64(63)) }, true, "past"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _, _ := slotWith(t, 8192, 7)
			c.change(b)
			if c.fixCRC {
				setCRC(b)
			}
			_, err := ParseSlotHeader(b, 8192, 7, "slot 3")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "slot 3") || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want an ErrCorrupt naming slot 3 and %q", err, c.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%T is not a *FormatError", err)
			}
		})
	}
}

func TestRingHeader(t *testing.T) {
	h := RingHeader{Slots: 6, SlotBytes: 3 * SlotAlign, Nonce: 0xfeedface}
	got, err := ParseRingHeader(h.Encode())
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if h.FileBytes() != 4096+6*3*4096 || h.SlotOffset(2) != 4096+2*3*4096 || h.SlotOffset(6) != -1 {
		t.Fatalf("geometry: %d bytes, slot 2 at %d", h.FileBytes(), h.SlotOffset(2))
	}
	for _, bad := range []RingHeader{{Slots: 0, SlotBytes: 4096}, {Slots: MaxSlots + 1, SlotBytes: 4096},
		{Slots: 1, SlotBytes: 4095}, {Slots: 1, SlotBytes: 6000}, {Slots: 1, SlotBytes: 2 * MaxSlotBytes}} {
		if _, err := ParseRingHeader(bad.Encode()); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	b := h.Encode()
	b[20] ^= 1
	if _, err := ParseRingHeader(b); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a flipped bit: %v", err)
	}
	if _, err := ParseRingHeader(b[:20]); err == nil {
		t.Fatal("a short header accepted")
	}
}

func TestCreate(t *testing.T) {
	if !Supported {
		t.Skip("no shared-memory rings on this system")
	}
	dir := t.TempDir()
	r, err := Create(dir, 3, 2*SlotAlign)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(r.Path)
	if err != nil || fi.Size() != 4096+3*8192 || fi.Mode().Perm() != 0o600 || filepath.Dir(r.Path) != dir {
		t.Fatalf("ring file %s: %v, %v", r.Path, fi, err)
	}
	// What the writer puts in a slot is what a reader of the file sees.
	ts := sampleTensors()
	used, _ := Place(ts)
	s := r.Slot(2)
	if len(s) != 8192 || cap(s) != 8192 {
		t.Fatalf("slot of %d bytes (cap %d)", len(s), cap(s))
	}
	s[1024] = 0xab
	if err := WriteSlotHeader(s, 9, used, ts); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	rh, err := ParseRingHeader(file)
	if err != nil || rh != r.Header {
		t.Fatalf("ring header in the file: %+v, %v", rh, err)
	}
	off := rh.SlotOffset(2)
	if _, err := ParseSlotHeader(file[off:off+8192], 8192, 9, "slot 2"); err != nil || file[off+1024] != 0xab {
		t.Fatalf("slot 2 in the file: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ring file left after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := Create(dir, 0, 4096); err == nil {
		t.Fatal("a ring of 0 slots")
	}
	if _, err := Create(filepath.Join(dir, "missing"), 1, 4096); err == nil {
		t.Fatal("a ring in a missing directory")
	}
}
