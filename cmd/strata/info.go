package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// infoCmd is 'strata info [DATASET]'.
type infoCmd struct {
	Dataset string `arg:"" optional:"" help:"A Strata dataset directory or a built-in dataset name to summarize." placeholder:"DIR|NAME"`
}

func (c *infoCmd) Run(e *env) error {
	w := e.stdout
	fmt.Fprintf(w, "strata %s (%s %s/%s, %d CPUs, GOMAXPROCS %d)\n", train.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "back ends:")
	for _, kind := range backend.Kinds() {
		b, err := backend.Open(kind)
		if err != nil {
			fmt.Fprintf(w, "  %-6s unavailable: %v\n", kind, err)
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
	if _, err := os.Stat(filepath.Join(c.Dataset, dataset.ManifestFile)); err == nil {
		s, err := dataset.Info(c.Dataset)
		if err != nil {
			return err
		}
		fmt.Fprint(w, s.String())
		return nil
	}
	ds, closeDS, err := openDataset(c.Dataset, true)
	if err != nil {
		return err
	}
	defer closeDS()
	fmt.Fprint(w, summarize(ds))
	return nil
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
