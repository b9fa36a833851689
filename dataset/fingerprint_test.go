package dataset

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/internal/testkit"
)

func TestFingerprint(t *testing.T) {
	dir, mem := writeTiny(t)
	want := mem.Fingerprint()
	if !regexp.MustCompile(`^v1:[0-9a-f]{32}$`).MatchString(want) {
		t.Fatalf("fingerprint %q, want v1: and 32 hex digits", want)
	}
	if again := tiny().Fingerprint(); again != want {
		t.Fatalf("not stable: %s then %s", want, again)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Fingerprint(); got != want {
		t.Fatalf("manifest fingerprint %s, in-memory %s", got, want)
	}
	for _, opts := range []OpenOptions{{}, {NoMmap: true}} {
		d, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Fingerprint(); got != want {
			t.Errorf("Open(%+v).Fingerprint() = %s, want %s", opts, got, want)
		}
		// A copy with other features is another dataset.
		if got := d.WithRowNormalizedFeatures().Fingerprint(); got == want {
			t.Errorf("row-normalized copy keeps the fingerprint %s", got)
		}
		d.Close()
	}
	renamed := tiny()
	renamed.Name = "other"
	if got := renamed.Fingerprint(); got != want {
		t.Errorf("renaming changed the fingerprint: %s vs %s", got, want)
	}
	// Every part of the content changes it.
	for name, edit := range map[string]func(d *Dataset){
		"feature":  func(d *Dataset) { d.Features[4] = 3 },
		"label":    func(d *Dataset) { d.Labels[2] = 0 },
		"split":    func(d *Dataset) { d.Test = []int32{4} },
		"weight":   func(d *Dataset) { d.Graph.Weights[0] = 7 },
		"directed": func(d *Dataset) { d.Directed = true },
		"no train": func(d *Dataset) { d.Train = nil },
	} {
		d := tiny()
		edit(d)
		if got := d.Fingerprint(); got == want {
			t.Errorf("%s: changing it keeps the fingerprint", name)
		}
	}
	if (*Dataset)(nil).Fingerprint() != "" {
		t.Error("nil dataset has a fingerprint")
	}
}

// TestOpenRefusesFIFO: a FIFO in place of the manifest or of an array file
// is refused at once instead of blocking Open (and Info, ReadManifest)
// forever.
func TestOpenRefusesFIFO(t *testing.T) {
	for _, name := range []string{ManifestFile, ArrayFile(ArrIndices), ArrayFile(ArrFeatures)} {
		t.Run(name, func(t *testing.T) {
			dir, _ := writeTiny(t)
			p := filepath.Join(dir, name)
			testkit.Mkfifo(t, p)
			testkit.NoBlock(t, "dataset.Open", func() {
				d, err := Open(dir, OpenOptions{Quiet: true})
				if err == nil {
					d.Close()
					t.Errorf("Open with a FIFO %s succeeded", name)
					return
				}
				if !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), p) {
					t.Errorf("Open: %v, want a refusal naming %s as not a regular file", err, p)
				}
			}, p)
			if name == ManifestFile {
				testkit.NoBlock(t, "dataset.Info", func() {
					if _, err := Info(dir); !errors.Is(err, regfile.ErrNotRegular) {
						t.Errorf("Info: %v, want ErrNotRegular", err)
					}
				}, p)
			}
		})
	}
}
