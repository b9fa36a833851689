package importer

import (
	"errors"
	"runtime"
	"testing"
)

// TestImportMemoryRefused: a node count the machine cannot hold (a one-line
// edge list with --num-nodes 2e9 was OOM-killed at 24 GB) is refused with a
// *MemoryError carrying the estimate, before anything is sized from it.
func TestImportMemoryRefused(t *testing.T) {
	dir := t.TempDir()
	snap := writeFile(t, dir, "one.txt", []byte("0 1\n"))
	npyDir := t.TempDir()
	writeFile(t, npyDir, "edge_index.npy", npyBytes("<i8", []int64{2, 1}, le([]int64{0, 1})))
	const limit = 1 << 30
	for _, tc := range []struct {
		name  string
		load  func(Options) error
		nodes int64
		edges int64
	}{
		{"snap", func(o Options) error { _, err := LoadSNAP(snap, o); return err }, 2_000_000_000, 0},
		{"npy", func(o Options) error { _, err := LoadNPY(npyDir, o); return err }, 2_000_000_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := tc.load(Options{Quiet: true, NumNodes: tc.nodes, MaxBytes: limit})
			runtime.ReadMemStats(&after)
			var me *MemoryError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want a *MemoryError", err)
			}
			if me.Nodes != tc.nodes || me.Edges != tc.edges || me.Limit != limit || me.Source != "Options.MaxBytes" ||
				me.Need != EstimateBytes(tc.nodes, tc.edges, false) || me.Need < 32*tc.nodes {
				t.Fatalf("%+v", me)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Fatalf("allocated %d bytes before refusing", got)
			}
			// The same import within the bound (no bound) is not refused for
			// a small node count.
			if err := tc.load(Options{Quiet: true, NumNodes: 5, MaxBytes: limit}); err != nil {
				t.Fatalf("5 nodes: %v", err)
			}
		})
	}
	// The edges count too, and a negative bound turns the check off.
	if _, err := LoadSNAP(snap, Options{Quiet: true, MaxBytes: 10}); !errors.As(err, new(*MemoryError)) {
		t.Fatalf("MaxBytes 10: %v", err)
	}
	if _, err := LoadSNAP(snap, Options{Quiet: true, MaxBytes: -1}); err != nil {
		t.Fatalf("MaxBytes -1: %v", err)
	}
}

func TestEstimateBytes(t *testing.T) {
	if a, b := EstimateBytes(1000, 10, false), EstimateBytes(1000, 10, true); a != 32*1000+20*10 || b != a+40 {
		t.Fatalf("EstimateBytes = %d, %d", a, b)
	}
	if got := EstimateBytes(1<<62, 1<<62, true); got != 1<<62 {
		t.Fatalf("huge: %d, want the 2^62 cap", got)
	}
}
