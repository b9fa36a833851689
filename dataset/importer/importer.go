package importer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/regfile"
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
	// MaxBytes bounds the memory the import may take to build the graph
	// (EstimateBytes); above it Load returns a *MemoryError before
	// allocating. 0 means the memory the machine has left (MemAvailable or
	// the cgroup limit; no bound where neither can be read); negative means
	// no bound.
	MaxBytes int64
	// Quiet disables progress bars.
	Quiet bool
	// Overwrite and NoSync are passed to dataset.Write by Import.
	Overwrite bool
	NoSync    bool

	// limitNodes, when > 0, refuses a stated node count above it before
	// anything of that size is allocated (the fuzz targets set it, so one
	// input cannot cost seconds).
	limitNodes int64
}

// Detect guesses the layout of src: a directory with meta.json is Shared,
// one with (raw/)edge.csv[.gz] is OGB, one with .npy edges is NPY, one
// with (raw/)num-node-dict.csv[.gz] is OGBHetero, one with nodes/ and
// edges/ folders is TypedNPY, and a regular file is SNAP.
func Detect(src string) (Kind, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("importer: %w", err)
	}
	if !fi.IsDir() {
		return SNAP, nil
	}
	// A path that exists but cannot be examined (a symbolic-link loop, no
	// permission) is reported as such, not as an unknown layout.
	var statErr error
	exists := func(p ...string) bool {
		path := filepath.Join(append([]string{src}, p...)...)
		_, err := os.Stat(path)
		if err != nil && !notExist(err) && statErr == nil {
			statErr = fmt.Errorf("importer: %w", err)
		}
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
	if k, ok := detectTyped(src); ok { // typed layouts (typed.go)
		return k, nil
	}
	if statErr != nil {
		return "", statErr
	}
	if _, err := os.ReadDir(src); err != nil {
		return "", fmt.Errorf("importer: %w", err)
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
	if IsTyped(kind) {
		return nil, fmt.Errorf("importer: %s is a typed layout (%s): use LoadHetero", src, kind)
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

// notExist reports whether a stat error means the path is simply not
// there (including a path through a regular file).
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// findRegular returns the first of paths that exists ("" if none). One
// that exists but is not a regular file (a FIFO, a directory), or cannot
// be examined (a symbolic-link loop, no permission), is an error naming
// it, never skipped.
func findRegular(paths ...string) (string, error) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			if notExist(err) {
				continue
			}
			return "", fmt.Errorf("importer: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("importer: %w", &fs.PathError{Op: "open", Path: p, Err: &regfile.NotRegularError{Mode: fi.Mode()}})
		}
		return p, nil
	}
	return "", nil
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
