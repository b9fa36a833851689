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
	"github.com/strata-gnn/strata/dataset/split"
)

// importCmd is 'strata import SRC DST' and 'strata import --edges FILE
// [--nodes FILE] DST'.
type importCmd struct {
	Src string `arg:"" optional:"" help:"Input: a shared-datasets folder (meta.json + *.bin.gz), an OGB node-property folder (raw/edge.csv.gz ...), a folder of .npy arrays, or an edge-list text file (SNAP, optionally .gz; lines 'src dst' or 'src dst weight'). With --edges, give only DST." type:"path"`
	Dst string `arg:"" optional:"" help:"Output Strata dataset directory (must not exist unless --overwrite)." type:"path"`

	Kind       string `help:"Input layout: ${kinds} (default: detected)." enum:"shared,ogb,snap,npy,npy-typed,ogb-hetero," default:""`
	Name       string `help:"Dataset name (default: the input's base name)."`
	Symmetrize bool   `help:"Store every edge in both directions and mark the graph undirected."`
	Split      int    `help:"shared: Geom-GCN split K (0 = the top-level split files)." default:"0"`
	OGBSplit   string `name:"ogb-split" help:"ogb: split folder name under split/ (default: the only one)."`
	RemapIDs   bool   `name:"remap-ids" help:"snap, tables: renumber the node IDs found to 0..n-1 in ascending order (tables write the mapping to node_ids.csv)."`
	NumNodes   int64  `help:"snap, npy, edge table without a node table: node count when larger than the largest ID + 1." default:"0"`
	Overwrite  bool   `help:"Replace an existing dataset directory at DST."`
	AddReverse bool   `name:"add-reverse" help:"npy-typed, ogb-hetero: add the reverse of every relation (rev_REL), as PyG's ToUndirected."`

	tableFlags
	attachFlags
	splitFlags
}

// tableFlags select CSV/Parquet tables and their columns.
type tableFlags struct {
	Edges       string   `group:"tables" help:"Edge table: CSV with a header row (.csv, .tsv, optionally .gz) or Parquet; replaces SRC." type:"path"`
	Nodes       string   `group:"tables" help:"Node table (CSV or Parquet): one row per node, in node order." type:"path"`
	Delimiter   string   `group:"tables" help:"CSV field delimiter: one character, or 'tab' (default: ',', a tab for .tsv)."`
	SrcCol      string   `group:"tables" name:"src-col" help:"Source ID column (default: src, source, src_id, from or u)."`
	DstCol      string   `group:"tables" name:"dst-col" help:"Destination ID column (default: dst, target, dst_id, to or v)."`
	WeightCol   string   `group:"tables" name:"weight-col" help:"Edge weight column (default: weight, edge_weight or w if present; '-' ignores it). Weights let 'train --weighted' sample by weight."`
	EdgeTypeCol string   `group:"tables" name:"edge-type-col" help:"Edge type column (default: etype or edge_type); more than one type is refused (typed tables are not supported yet: use --kind npy-typed or ogb-hetero)."`
	IDCol       string   `group:"tables" name:"id-col" help:"Node ID column of the node table (default: id, node_id or nid; none: node i is row i). IDs may be integers or strings."`
	FeatureCols []string `group:"tables" name:"feature-cols" help:"Feature columns: names or globs in order (feat_*), or one list column (default: feat, features, x, emb, embedding, else feat_*, feature_*, x_*; '-' = none)."`
	LabelCol    string   `group:"tables" name:"label-col" help:"Label column: integers (-1 or empty = unlabeled) or class names (default: label, y or labels)."`
	SplitCol    string   `group:"tables" name:"split-col" help:"Split column: train/val/test or 0/1/2, empty = none (default: split; else train_mask/val_mask/test_mask columns)."`
	NodeTypeCol string   `group:"tables" name:"node-type-col" help:"Node type column (default: ntype or node_type); more than one type is refused, as for edge types."`
}

// attachFlags add .npy arrays to any import.
type attachFlags struct {
	Features string `group:"attach" help:"Features to attach: .npy float [N, F] in node order (replaces any the input has)." type:"path"`
	Labels   string `group:"attach" help:"Labels to attach: .npy int [N] (-1 = unlabeled)." type:"path"`
	TrainIdx string `group:"attach" name:"train-idx" help:"Train nodes to attach: .npy node IDs or a boolean mask [N]." type:"path"`
	ValIdx   string `group:"attach" name:"val-idx" help:"Validation nodes to attach (.npy IDs or mask)." type:"path"`
	TestIdx  string `group:"attach" name:"test-idx" help:"Test nodes to attach (.npy IDs or mask)." type:"path"`
}

// splitFlags make seeded splits (import and 'strata split').
type splitFlags struct {
	NodeSplit []float64 `group:"split" name:"node-split" help:"Make a random node split: train,val,test fractions of the labeled nodes (e.g. 0.6,0.2,0.2)."`
	Stratify  bool      `group:"split" help:"--node-split per class, keeping the class proportions in every split."`
	EdgeSplit []float64 `group:"split" name:"edge-split" help:"Make an edge split for link prediction: train,val,test fractions of the edges (e.g. 0.85,0.05,0.1), written to DST/edge_split/."`
	SplitSeed uint64    `group:"split" name:"split-seed" help:"Seed of --node-split and --edge-split." default:"0"`
}

// validate checks the split fractions (exit 2, one line naming the flag).
func (f *splitFlags) validate() error {
	for _, x := range []struct {
		name string
		v    []float64
	}{{"node-split", f.NodeSplit}, {"edge-split", f.EdgeSplit}} {
		if x.v == nil {
			continue
		}
		if len(x.v) != 3 {
			return usageError{fmt.Errorf("--%s %s: want three fractions train,val,test (e.g. 0.6,0.2,0.2)", x.name, joinFloats(x.v))}
		}
		if err := split.Fractions(x.v).Check(); err != nil {
			return usageError{fmt.Errorf("--%s %s: %v", x.name, joinFloats(x.v), err)}
		}
	}
	if f.Stratify && f.NodeSplit == nil {
		return usageError{fmt.Errorf("--stratify needs --node-split")}
	}
	return nil
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// delimiter parses --delimiter.
func (f *tableFlags) delimiter() (byte, error) {
	switch d := f.Delimiter; {
	case d == "":
		return 0, nil
	case d == "tab" || d == `\t` || d == "\t":
		return '\t', nil
	case len(d) == 1 && d != `"` && d != "\n" && d != "\r":
		return d[0], nil
	}
	return 0, usageError{fmt.Errorf("--delimiter %q: want one character (not a quote or newline), or 'tab'", f.Delimiter)}
}

// validateTables checks the table and positional arguments.
func (c *importCmd) validateTables() error {
	if _, err := c.delimiter(); err != nil {
		return err
	}
	if err := c.splitFlags.validate(); err != nil {
		return err
	}
	if c.Edges == "" {
		for _, x := range []struct{ name, v string }{{"nodes", c.Nodes}, {"delimiter", c.Delimiter}, {"src-col", c.SrcCol},
			{"dst-col", c.DstCol}, {"weight-col", c.WeightCol}, {"edge-type-col", c.EdgeTypeCol}, {"id-col", c.IDCol},
			{"label-col", c.LabelCol}, {"split-col", c.SplitCol}, {"node-type-col", c.NodeTypeCol}} {
			if x.v != "" {
				return usageError{fmt.Errorf("--%s needs --edges (an edge table)", x.name)}
			}
		}
		if c.FeatureCols != nil {
			return usageError{fmt.Errorf("--feature-cols needs --edges and --nodes")}
		}
		if c.Src == "" || c.Dst == "" {
			return usageError{fmt.Errorf("want SRC and DST (or --edges FILE and DST)")}
		}
		return nil
	}
	if c.Dst != "" {
		return usageError{fmt.Errorf("--edges replaces SRC: give only DST")}
	}
	if c.AddReverse {
		return usageError{fmt.Errorf("--add-reverse applies to the typed layouts %v, not to --edges", importer.TypedKinds())}
	}
	if c.Src == "" {
		return usageError{fmt.Errorf("want DST, the output dataset directory")}
	}
	if c.Kind != "" {
		return usageError{fmt.Errorf("--kind does not apply to --edges (tables are CSV or Parquet, told apart by content)")}
	}
	if c.Nodes != "" && c.NumNodes != 0 {
		return usageError{fmt.Errorf("--num-nodes with --nodes: the node table's rows are the nodes")}
	}
	if c.Nodes == "" {
		for _, x := range []struct{ name, v string }{{"id-col", c.IDCol}, {"label-col", c.LabelCol}, {"split-col", c.SplitCol}, {"node-type-col", c.NodeTypeCol}} {
			if x.v != "" {
				return usageError{fmt.Errorf("--%s needs --nodes (a node table)", x.name)}
			}
		}
		if c.FeatureCols != nil {
			return usageError{fmt.Errorf("--feature-cols needs --nodes (a node table)")}
		}
	}
	return nil
}

func (c *importCmd) Run(e *env) error {
	src, dst := c.Src, c.Dst
	if c.Edges != "" {
		src, dst = c.Edges, c.Src
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	start := time.Now()
	opts := importer.Options{
		Name: c.Name, Symmetrize: c.Symmetrize, Split: c.Split, OGBSplit: c.OGBSplit,
		RemapIDs: c.RemapIDs, NumNodes: c.NumNodes, Quiet: e.quiet, Overwrite: c.Overwrite,
	}
	var d *dataset.Dataset
	var res *importer.TableImport
	layout := ""
	if c.Edges != "" {
		delim, _ := c.delimiter()
		to := importer.TableOptions{Options: opts, Edges: c.Edges, Nodes: c.Nodes, Delimiter: delim,
			Src: c.SrcCol, Dst: c.DstCol, Weight: c.WeightCol, EdgeType: c.EdgeTypeCol,
			ID: c.IDCol, Features: c.FeatureCols, Label: c.LabelCol, Split: c.SplitCol, NodeType: c.NodeTypeCol}
		var err error
		if res, err = importer.LoadTables(to); err != nil {
			return c.memoryUsage(err)
		}
		d, layout = res.Dataset, "table"
	} else {
		kind := importer.Kind(c.Kind)
		if kind == "" {
			k, err := importer.Detect(src)
			if err != nil {
				return err
			}
			kind = k
		}
		if importer.IsTyped(kind) {
			if err := c.plainOnly(kind); err != nil {
				return err
			}
			return c.runHetero(e, kind) // typed layouts (hetero.go)
		}
		if c.AddReverse {
			return usageError{fmt.Errorf("--add-reverse applies to the typed layouts %v, not %s", importer.TypedKinds(), kind)}
		}
		var err error
		if d, err = importer.Load(kind, src, opts); err != nil {
			return c.memoryUsage(err)
		}
		layout = string(kind)
	}
	if err := importer.Attach(d, importer.AttachOptions{Features: c.attachFlags.Features, Labels: c.Labels,
		Train: c.TrainIdx, Val: c.ValIdx, Test: c.TestIdx}); err != nil {
		return err
	}
	es, err := c.splitFlags.apply(d)
	if err != nil {
		return err
	}
	var sides []string
	wo := dataset.WriteOptions{Overwrite: c.Overwrite, Quiet: e.quiet, Sidecar: func(tmp string) error {
		if res != nil && res.NodeIDs != nil {
			if err := importer.WriteNodeIDs(tmp, res.NodeIDs); err != nil {
				return err
			}
			sides = append(sides, importer.NodeIDsFile)
		}
		if res != nil && res.ClassNames != nil {
			if err := importer.WriteClassNames(tmp, res.ClassNames); err != nil {
				return err
			}
			sides = append(sides, importer.ClassNamesFile)
		}
		if es != nil {
			if err := es.WriteDir(filepath.Join(tmp, split.EdgeSplitDir)); err != nil {
				return err
			}
			sides = append(sides, split.EdgeSplitDir+"/")
		}
		return nil
	}}
	if err := dataset.Write(dst, d, wo); err != nil {
		return err
	}
	s, err := dataset.Info(dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "imported %s (%s layout) into %s in %.1fs\n", src, layout, dst, time.Since(start).Seconds())
	fmt.Fprint(e.stdout, s.String())
	if len(sides) > 0 {
		fmt.Fprintf(e.stdout, "also wrote %s\n", strings.Join(sides, ", "))
	}
	return nil
}

// plainOnly refuses the attach and split flags for a typed layout (they
// write the arrays of a plain dataset).
func (c *importCmd) plainOnly(kind importer.Kind) error {
	a := c.attachFlags
	for _, x := range []struct {
		set  bool
		flag string
	}{{a.Features != "", "features"}, {a.Labels != "", "labels"}, {a.TrainIdx != "", "train-idx"}, {a.ValIdx != "", "val-idx"},
		{a.TestIdx != "", "test-idx"}, {c.NodeSplit != nil, "node-split"}, {c.EdgeSplit != nil, "edge-split"}} {
		if x.set {
			return usageError{fmt.Errorf("--%s does not apply to the typed layout %s yet", x.flag, kind)}
		}
	}
	return nil
}

// memoryUsage turns an import too large for memory because of --num-nodes
// into a usage error naming the flag.
func (c *importCmd) memoryUsage(err error) error {
	var me *importer.MemoryError
	if errors.As(err, &me) && c.NumNodes > 0 {
		return usageError{fmt.Errorf("--num-nodes %d: %w", c.NumNodes, err)}
	}
	return err
}

// apply makes the requested node split (into d) and edge split.
func (f *splitFlags) apply(d *dataset.Dataset) (*split.EdgeSplit, error) {
	if f.NodeSplit != nil {
		if d.Labels == nil {
			return nil, fmt.Errorf("--node-split: the dataset has no labels to split (add a label column or --labels)")
		}
		tr, va, te, err := split.Nodes(d.Labels, split.Fractions(f.NodeSplit), f.SplitSeed, f.Stratify)
		if err != nil {
			return nil, fmt.Errorf("--node-split: %w", err)
		}
		d.Train, d.Val, d.Test = tr, va, te
	}
	if f.EdgeSplit == nil {
		return nil, nil
	}
	es, err := split.Edges(d, split.Fractions(f.EdgeSplit), f.SplitSeed)
	if err != nil {
		return nil, fmt.Errorf("--edge-split: %w", err)
	}
	return es, nil
}

func kindNames() string {
	var s []string
	for _, k := range append(importer.Kinds(), importer.TypedKinds()...) {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
