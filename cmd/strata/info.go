package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// infoCmd is 'strata info [DATASET]'.
type infoCmd struct {
	Dataset string `arg:"" optional:"" help:"A Strata dataset directory or a built-in dataset name to summarize. A dataset directory is verified as 'train' opens it (checksums, ID ranges, finite values); an error exits non-zero." placeholder:"DIR|NAME"`
	Fast    bool   `help:"Summarize a Strata dataset directory from its manifest only (file sizes checked, no checksums or contents)."`
}

func (c *infoCmd) Run(e *env) error {
	w := e.stdout
	fmt.Fprintf(w, "strata %s (%s %s/%s, %d CPUs, GOMAXPROCS %d)\n", train.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "back ends:")
	for _, kind := range backend.Kinds() {
		b, err := backend.Open(kind)
		if err != nil {
			fmt.Fprintf(w, "  %-6s unavailable: %s\n", kind, unavailable(err))
			continue
		}
		fmt.Fprintf(w, "  %-6s ok (%s)%s\n", kind, b.Name(), describe(b))
	}
	if b, err := openDevice("auto"); err == nil {
		fmt.Fprintf(w, "auto device: %s\n", b.Name())
	}
	if err := writeCUDAInfo(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "built-in datasets: %s\n", strings.Join(builtinNames, ", "))
	if c.Dataset == "" {
		return nil
	}
	fmt.Fprintln(w)
	isDir, err := hasManifest(c.Dataset)
	if err != nil {
		return err
	}
	if isDir {
		if v, err := dataset.ManifestVersion(c.Dataset); err == nil && v == dataset.FormatVersionHetero {
			return c.infoHetero(e) // typed (hetero.go)
		}
		if !c.Fast {
			// Verify everything train's open does, so info never calls
			// a dataset fine that train would refuse.
			ds, err := dataset.Open(c.Dataset, dataset.OpenOptions{Quiet: e.quiet})
			if err != nil {
				return err
			}
			if err := ds.Close(); err != nil {
				return err
			}
		}
		s, err := dataset.Info(c.Dataset)
		if err != nil {
			return err
		}
		fmt.Fprint(w, s.String())
		if c.Fast {
			fmt.Fprintln(w, "verified    no (--fast: manifest and file sizes only)")
		} else {
			fmt.Fprintln(w, "verified    checksums, structure, ID ranges, finite values")
		}
		return nil
	}
	if c.Fast {
		return usageError{fmt.Errorf("--fast needs a Strata dataset directory (with %s); %s has none", dataset.ManifestFile, c.Dataset)}
	}
	ds, closeDS, err := openDataset(c.Dataset, true)
	if err != nil {
		return err
	}
	defer closeDS()
	fmt.Fprint(w, summarize(ds))
	return nil
}

// hasManifest reports whether path is a Strata dataset directory (holds
// manifest.json). A manifest that exists but cannot be examined (a
// symbolic-link loop, no permission on the directory) is an error naming
// it, not "no manifest".
func hasManifest(path string) (bool, error) {
	_, err := os.Stat(filepath.Join(path, dataset.ManifestFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return false, nil
	}
	return false, fmt.Errorf("dataset: %w", err)
}

// describe adds back-end details when the back end offers them.
func describe(b backend.Backend) string {
	if g, ok := b.(interface{ GemmImpl() string }); ok {
		return ", gemm " + g.GemmImpl()
	}
	return ""
}

// summarize describes an in-memory dataset like dataset.Summary does a
// directory.
func summarize(ds *dataset.Dataset) string {
	var b strings.Builder
	dir := "directed"
	if !ds.Directed {
		dir = "undirected (both directions stored)"
	}
	fmt.Fprintf(&b, "dataset     %s\n", ds.Name)
	fmt.Fprintf(&b, "nodes       %d\n", ds.NumNodes())
	fmt.Fprintf(&b, "edges       %d, %s\n", ds.Graph.NumEdges(), dir)
	fmt.Fprintf(&b, "features    %d\n", ds.FeatDim)
	fmt.Fprintf(&b, "classes     %d\n", ds.NumClasses)
	fmt.Fprintf(&b, "split       train %d / val %d / test %d\n", len(ds.Train), len(ds.Val), len(ds.Test))
	return b.String()
}
