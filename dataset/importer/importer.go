package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/dataset"
)

// Kind names an input layout.
type Kind string

// Supported input layouts.
const (
	Shared Kind = "shared" // meta.json + *.bin.gz (the shared datasets folder)
	OGB    Kind = "ogb"    // OGB node-property raw CSV layout
	SNAP   Kind = "snap"   // whitespace-separated edge list text, optionally .gz
	NPY    Kind = "npy"    // a directory of NumPy .npy arrays
)

// Kinds lists the supported layouts.
func Kinds() []Kind { return []Kind{Shared, OGB, SNAP, NPY} }

// Options controls an import. The zero value is a plain import.
type Options struct {
	// Name of the dataset (default: the base name of the source).
	Name string
	// Symmetrize stores every edge in both directions (duplicates
	// coalesced) and marks the result undirected. Inputs that are already
	// undirected are unaffected.
	Symmetrize bool
	// Split picks a Geom-GCN split K for the shared layout (0 = the
	// top-level split files).
	Split int
	// OGBSplit names the split directory of an OGB dataset (split/<name>);
	// empty picks the only one (an error if there are several).
	OGBSplit string
	// RemapIDs (SNAP) renumbers the node IDs that occur in the edge list to
	// 0..n-1 in ascending order of the original ID, for sparse ID spaces.
	RemapIDs bool
	// NumNodes (SNAP, npy) sets the node count when it exceeds the largest
	// ID + 1 (isolated trailing nodes); 0 infers it.
	NumNodes int64
	// Quiet disables progress bars.
	Quiet bool
	// Overwrite and NoSync are passed to dataset.Write by Import.
	Overwrite bool
	NoSync    bool
}

// Detect guesses the layout of src: a directory with meta.json is Shared,
// one with (raw/)edge.csv[.gz] is OGB, one with .npy edges is NPY, and a
// regular file is SNAP.
func Detect(src string) (Kind, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("importer: %w", err)
	}
	if !fi.IsDir() {
		return SNAP, nil
	}
	exists := func(p ...string) bool {
		_, err := os.Stat(filepath.Join(append([]string{src}, p...)...))
		return err == nil
	}
	switch {
	case exists("meta.json") && exists("edges.bin.gz"):
		return Shared, nil
	case exists("raw", "edge.csv.gz") || exists("raw", "edge.csv") || exists("edge.csv.gz") || exists("edge.csv"):
		return OGB, nil
	}
	for _, nm := range npyEdgeNames {
		if exists(nm) {
			return NPY, nil
		}
	}
	return "", fmt.Errorf("importer: cannot tell the layout of %s (want meta.json + edges.bin.gz, raw/edge.csv.gz, %s, or an edge-list file)",
		src, strings.Join(npyEdgeNames, " or "))
}

// Load reads src in layout kind (detected when empty) into memory and
// validates the result.
func Load(kind Kind, src string, opts Options) (*dataset.Dataset, error) {
	if kind == "" {
		k, err := Detect(src)
		if err != nil {
			return nil, err
		}
		kind = k
	}
	switch kind {
	case Shared:
		return LoadShared(src, opts)
	case OGB:
		return LoadOGB(src, opts)
	case SNAP:
		return LoadSNAP(src, opts)
	case NPY:
		return LoadNPY(src, opts)
	}
	return nil, fmt.Errorf("importer: unknown kind %q (want one of %v)", kind, Kinds())
}

// Import converts src (layout kind, detected when empty) into a Strata
// dataset directory at dst.
func Import(kind Kind, src, dst string, opts Options) error {
	d, err := Load(kind, src, opts)
	if err != nil {
		return err
	}
	return dataset.Write(dst, d, dataset.WriteOptions{Overwrite: opts.Overwrite, NoSync: opts.NoSync, Quiet: opts.Quiet})
}

// defaultName returns opts.Name or the base name of src without extensions.
func defaultName(src string, opts Options) string {
	if opts.Name != "" {
		return opts.Name
	}
	b := filepath.Base(filepath.Clean(src))
	for _, ext := range []string{".gz", ".txt", ".tsv", ".csv", ".edges", ".el"} {
		b = strings.TrimSuffix(b, ext)
	}
	return b
}
