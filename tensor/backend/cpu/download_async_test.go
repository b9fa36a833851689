package cpu

import (
	"slices"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// TestDownloadAsync: the CPU's DownloadAsync copies the buffer's first
// bytes into the host buffer at the offset at once, and refuses copies
// that do not fit either side.
func TestDownloadAsync(t *testing.T) {
	b, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := b.Alloc(backend.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(src, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	hb, err := b.AllocPinned(20, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DownloadAsync(hb, 4, src, 12); err != nil {
		t.Fatal(err)
	}
	if got, want := hb.Float32s(), []float32{0, 1, 2, 3, 0}; !slices.Equal(got, want) {
		t.Fatalf("host buffer %v, want %v", got, want)
	}
	for _, c := range []struct{ off, bytes uint64 }{{12, 12}, {0, 20}, {24, 0}} {
		if err := b.DownloadAsync(hb, c.off, src, c.bytes); err == nil {
			t.Errorf("DownloadAsync of %d bytes at %d: no error", c.bytes, c.off)
		}
	}
}
