package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
)

// importCmd is 'strata import SRC DST'.
type importCmd struct {
	Src string `arg:"" help:"Input: a shared-datasets folder (meta.json + *.bin.gz), an OGB node-property folder (raw/edge.csv.gz ...), a folder of .npy arrays, or an edge-list text file (SNAP, optionally .gz; lines 'src dst' or 'src dst weight')." type:"path"`
	Dst string `arg:"" help:"Output Strata dataset directory (must not exist unless --overwrite)." type:"path"`

	Kind       string `help:"Input layout: ${kinds} (default: detected)." enum:"shared,ogb,snap,npy,npy-typed,ogb-hetero," default:""`
	Name       string `help:"Dataset name (default: the input's base name)."`
	Symmetrize bool   `help:"Store every edge in both directions and mark the graph undirected."`
	Split      int    `help:"shared: Geom-GCN split K (0 = the top-level split files)." default:"0"`
	OGBSplit   string `name:"ogb-split" help:"ogb: split folder name under split/ (default: the only one)."`
	RemapIDs   bool   `name:"remap-ids" help:"snap: renumber the node IDs found to 0..n-1 in ascending order."`
	NumNodes   int64  `help:"snap, npy: node count when larger than the largest ID + 1." default:"0"`
	Overwrite  bool   `help:"Replace an existing dataset directory at DST."`
	AddReverse bool   `name:"add-reverse" help:"npy-typed, ogb-hetero: add the reverse of every relation (rev_REL), as PyG's ToUndirected."`
}

func (c *importCmd) Run(e *env) error {
	kind := importer.Kind(c.Kind)
	if kind == "" {
		k, err := importer.Detect(c.Src)
		if err != nil {
			return err
		}
		kind = k
	}
	if err := os.MkdirAll(filepath.Dir(c.Dst), 0o755); err != nil {
		return err
	}
	if importer.IsTyped(kind) {
		return c.runHetero(e, kind) // typed layouts (hetero.go)
	}
	if c.AddReverse {
		return usageError{fmt.Errorf("--add-reverse applies to the typed layouts %v, not %s", importer.TypedKinds(), kind)}
	}
	start := time.Now()
	opts := importer.Options{
		Name: c.Name, Symmetrize: c.Symmetrize, Split: c.Split, OGBSplit: c.OGBSplit,
		RemapIDs: c.RemapIDs, NumNodes: c.NumNodes, Quiet: e.quiet, Overwrite: c.Overwrite,
	}
	if err := importer.Import(kind, c.Src, c.Dst, opts); err != nil {
		var me *importer.MemoryError
		if errors.As(err, &me) && c.NumNodes > 0 {
			return usageError{fmt.Errorf("--num-nodes %d: %w", c.NumNodes, err)}
		}
		return err
	}
	s, err := dataset.Info(c.Dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "imported %s (%s layout) into %s in %.1fs\n", c.Src, kind, c.Dst, time.Since(start).Seconds())
	fmt.Fprint(e.stdout, s.String())
	return nil
}

func kindNames() string {
	var s []string
	for _, k := range append(importer.Kinds(), importer.TypedKinds()...) {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
