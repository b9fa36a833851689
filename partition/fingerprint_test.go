package partition

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/internal/testkit"
)

// TestPartitionFileFingerprint: Run records the fingerprints of the input
// and of the renumbered dataset; a partition file is refused for another
// dataset with the same node count (it used to be accepted), naming both
// fingerprints; a file without fingerprints (older writers) still loads.
func TestPartitionFileFingerprint(t *testing.T) {
	tmp := t.TempDir()
	d := smallDataset(t)
	dsDir := filepath.Join(tmp, "grid")
	if err := dataset.Write(dsDir, d, dataset.WriteOptions{NoSync: true, Quiet: true}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "parts")
	if _, err := Run(context.Background(), dsDir, out, RunOptions{Options: Options{K: 2, Seed: 1}, NoSync: true}, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, FileName)
	saved, pds, err := Load(out, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pds.Close()
	if want := d.Fingerprint(); saved.Meta.DatasetFingerprint != want {
		t.Fatalf("recorded dataset fingerprint %q, want %q", saved.Meta.DatasetFingerprint, want)
	}
	if saved.Meta.OutputFingerprint == "" || saved.Meta.OutputFingerprint == saved.Meta.DatasetFingerprint {
		t.Fatalf("output fingerprint %q", saved.Meta.OutputFingerprint)
	}
	if legacy, err := saved.CheckDataset(path, d); err != nil || legacy {
		t.Fatalf("CheckDataset on its own dataset: legacy %v, %v", legacy, err)
	}

	// Same name, same node count, other content.
	other := smallDataset(t)
	other.Features[7] = 42
	_, err = saved.CheckDataset(path, other)
	if !errors.Is(err, ErrOtherDataset) || !strings.Contains(err.Error(), saved.Meta.DatasetFingerprint) ||
		!strings.Contains(err.Error(), other.Fingerprint()) || !strings.Contains(err.Error(), path) {
		t.Fatalf("CheckDataset on another dataset: %v", err)
	}
	if _, err := saved.CheckDataset(path, &dataset.Dataset{Name: "grid", Graph: grid(3, 3)}); !errors.Is(err, ErrOtherDataset) {
		t.Fatalf("CheckDataset with another node count: %v", err)
	}

	// The renumbered dataset beside the file must be the one written with it.
	swapped := smallDataset(t)
	swapped.Labels[0] = 3
	if err := dataset.Write(filepath.Join(out, DatasetDir), swapped, dataset.WriteOptions{NoSync: true, Quiet: true, Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(out, dataset.OpenOptions{}); !errors.Is(err, ErrOtherDataset) || !strings.Contains(err.Error(), saved.Meta.OutputFingerprint) {
		t.Fatalf("Load with another renumbered dataset: %v", err)
	}

	// A file written without fingerprints loads, reported as legacy, and
	// falls back to the name check.
	saved.Meta.DatasetFingerprint, saved.Meta.OutputFingerprint = "", ""
	if err := WriteFile(path, saved, true); err != nil {
		t.Fatal(err)
	}
	old, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if legacy, err := old.CheckDataset(path, other); err != nil || !legacy {
		t.Fatalf("legacy file: legacy %v, %v", legacy, err)
	}
	renamed := smallDataset(t)
	renamed.Name = "elsewhere"
	if _, err := old.CheckDataset(path, renamed); !errors.Is(err, ErrOtherDataset) {
		t.Fatalf("legacy file, other name: %v", err)
	}
}

// TestReadFileRefusesFIFO: a FIFO in place of partition.bin is refused at
// once instead of blocking.
func TestReadFileRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName)
	testkit.Mkfifo(t, p)
	testkit.NoBlock(t, "partition.ReadFile", func() {
		if _, err := ReadFile(p); !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("ReadFile of a FIFO: %v", err)
		}
	}, p)
}
