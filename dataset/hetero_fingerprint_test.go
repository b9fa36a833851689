package dataset

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHeteroFingerprint: the fingerprint survives WriteHetero then
// OpenHetero, and any change to a feature, an edge, a weight, a label, a
// split or a name gives another one.
func TestHeteroFingerprint(t *testing.T) {
	h := tinyHetero()
	fp := h.Fingerprint()
	if !strings.HasPrefix(fp, "h1:") || len(fp) != 3+32 {
		t.Fatalf("fingerprint %q, want h1: and 32 hex digits", fp)
	}
	dir := filepath.Join(t.TempDir(), "d")
	if err := WriteHetero(dir, h, WriteOptions{Quiet: true}); err != nil {
		t.Fatal(err)
	}
	g, err := OpenHetero(dir, OpenOptions{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := g.Fingerprint(); got != fp {
		t.Fatalf("after write and open %s, before %s", got, fp)
	}
	seen := map[string]string{fp: "original"}
	for _, c := range []struct {
		name string
		edit func(h *Hetero)
	}{
		{"feature", func(h *Hetero) { h.NodeTypes[1].Features[4] = 5.5 }},
		{"edge", func(h *Hetero) { h.EdgeTypes[0].In.Indices[1] = 2 }},
		{"weight", func(h *Hetero) { h.EdgeTypes[1].In.Weights[0] = 3 }},
		{"label", func(h *Hetero) { h.Labels[2] = 0 }},
		{"split", func(h *Hetero) { h.Val, h.Test = h.Test, h.Val }},
		{"type name", func(h *Hetero) { h.NodeTypes[2].Name = "topic" }},
		{"relation name", func(h *Hetero) { h.EdgeTypes[2].Rel = "about" }},
	} {
		x := tinyHetero()
		c.edit(x)
		got := x.Fingerprint()
		if prev, dup := seen[got]; dup {
			t.Errorf("changing the %s gives the fingerprint of %s", c.name, prev)
		}
		seen[got] = c.name
	}
}
