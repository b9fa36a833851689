package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/internal/regfile"
)

// splitCmd is 'strata split DATASET'.
type splitCmd struct {
	Dataset   string `arg:"" help:"Strata dataset directory; updated in place unless --out." type:"path"`
	Out       string `help:"Write the dataset with its new splits to this directory instead." type:"path"`
	Overwrite bool   `help:"With --out: replace an existing dataset there."`
	splitFlags
	LinkRelation string `group:"split" name:"link-relation" help:"Typed dataset: the relation whose links --edge-split splits (SRC,REL,DST, src___rel___dst, or REL alone when unique)." placeholder:"SRC,REL,DST"`
}

// Validate is kong's hook for 'strata split'.
func (c *splitCmd) Validate() error {
	if err := c.splitFlags.validate(); err != nil {
		return err
	}
	if c.LinkRelation != "" && c.EdgeSplit == nil {
		return usageError{fmt.Errorf("--link-relation %s needs --edge-split (it names the relation whose links are split)", truncateFlag(c.LinkRelation))}
	}
	if c.NodeSplit == nil && c.EdgeSplit == nil {
		return usageError{fmt.Errorf("want --node-split and/or --edge-split")}
	}
	if c.Overwrite && c.Out == "" {
		return usageError{fmt.Errorf("--overwrite needs --out (without it the dataset is updated in place)")}
	}
	return nil
}

func (c *splitCmd) Run(e *env) error {
	if v, err := dataset.ManifestVersion(c.Dataset); err == nil && v == dataset.FormatVersionHetero {
		return c.runTyped(e)
	}
	if c.LinkRelation != "" {
		return usageError{fmt.Errorf("--link-relation %s: %s is not a typed dataset (format version %d); a homogeneous dataset's --edge-split splits all its edges", truncateFlag(c.LinkRelation), c.Dataset, dataset.FormatVersionHetero)}
	}
	d, err := dataset.Open(c.Dataset, dataset.OpenOptions{NoMmap: true})
	if err != nil {
		return err
	}
	defer d.Close()
	es, err := c.apply(d)
	if err != nil {
		return err
	}
	target := c.Dataset
	if c.Out != "" {
		target = c.Out
	}
	if c.NodeSplit == nil && c.Out == "" {
		// Only the edge split changes: the dataset's arrays stay as they are.
		if err := es.Replace(c.Dataset); err != nil {
			return err
		}
	} else {
		m, err := dataset.ReadManifest(c.Dataset)
		if err != nil {
			return err
		}
		skip := map[string]bool{dataset.ManifestFile: true}
		for _, a := range m.Arrays {
			skip[dataset.ArrayFile(a.Name)] = true
		}
		if es != nil {
			skip[split.EdgeSplitDir] = true
		}
		wo := dataset.WriteOptions{Overwrite: c.Out == "" || c.Overwrite, Quiet: e.quiet, Sidecar: func(tmp string) error {
			// Side files (node_ids.csv, an edge split, ...) stay with the dataset.
			if err := copySideFiles(c.Dataset, tmp, skip); err != nil {
				return err
			}
			if es != nil {
				return es.WriteDir(filepath.Join(tmp, split.EdgeSplitDir))
			}
			return nil
		}}
		if err := dataset.Write(target, d, wo); err != nil {
			return err
		}
	}
	if c.NodeSplit != nil {
		fmt.Fprintf(e.stdout, "node split (seed %d%s): train %d, val %d, test %d nodes\n", c.SplitSeed,
			map[bool]string{true: ", stratified"}[c.Stratify], len(d.Train), len(d.Val), len(d.Test))
	}
	if es != nil {
		kind := "undirected"
		if es.Directed {
			kind = "directed"
		}
		fmt.Fprintf(e.stdout, "edge split (seed %d): train %d, val %d, test %d %s edges in %s\n", c.SplitSeed,
			len(es.Src[0]), len(es.Src[1]), len(es.Src[2]), kind, filepath.Join(target, split.EdgeSplitDir))
	}
	return nil
}

// copySideFiles copies the regular files and one level of directories of
// src, except the names in skip and temporary files, into dst.
func copySideFiles(src, dst string, skip map[string]bool) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		name := ent.Name()
		if skip[name] || strings.HasPrefix(name, ".") {
			continue
		}
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		if ent.IsDir() {
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			if err := copySideFiles(from, to, nil); err != nil {
				return err
			}
			continue
		}
		if !ent.Type().IsRegular() {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	f, _, err := regfile.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runTyped is 'strata split' of a typed dataset: an edge split of the
// relation --link-relation names (split.RelationEdges), written to
// edge_split/ in place or with a copy of the dataset (--out).
func (c *splitCmd) runTyped(e *env) error {
	if c.NodeSplit != nil {
		return usageError{fmt.Errorf("--node-split: %s is a typed dataset, whose node split (of its target type) comes with its import; 'strata split' makes edge splits of one relation there (--edge-split, --link-relation)", c.Dataset)}
	}
	h, err := dataset.OpenHetero(c.Dataset, dataset.OpenOptions{NoMmap: true, Quiet: e.quiet})
	if err != nil {
		return err
	}
	defer h.Close()
	if c.LinkRelation == "" {
		names := make([]string, len(h.EdgeTypes))
		for r := range h.EdgeTypes {
			names[r] = h.EdgeTypeName(r)
		}
		return usageError{fmt.Errorf("--link-relation: %s is a typed dataset: name the relation whose links --edge-split splits, SRC,REL,DST; it has %s", c.Dataset, strings.Join(names, ", "))}
	}
	name, err := resolveRelation(h, c.LinkRelation)
	if err != nil {
		return err
	}
	es, err := split.RelationEdges(h, h.EdgeType(name), split.Fractions(c.EdgeSplit), c.SplitSeed)
	if err != nil {
		return fmt.Errorf("--edge-split: %w", err)
	}
	target := c.Dataset
	if c.Out == "" {
		if err := es.Replace(c.Dataset); err != nil {
			return err
		}
	} else {
		target = c.Out
		m, err := dataset.ReadHeteroManifest(c.Dataset)
		if err != nil {
			return err
		}
		skip := map[string]bool{dataset.ManifestFile: true, split.EdgeSplitDir: true}
		for _, a := range m.Arrays {
			skip[dataset.ArrayFile(a.Name)] = true
		}
		wo := dataset.WriteOptions{Overwrite: c.Overwrite, Quiet: e.quiet, Sidecar: func(tmp string) error {
			if err := copySideFiles(c.Dataset, tmp, skip); err != nil {
				return err
			}
			return es.WriteDir(filepath.Join(tmp, split.EdgeSplitDir))
		}}
		if err := dataset.WriteHetero(target, h, wo); err != nil {
			return err
		}
	}
	kind := "undirected"
	if es.Directed {
		kind = "directed"
	}
	fmt.Fprintf(e.stdout, "edge split of %s (seed %d): train %d, val %d, test %d %s links in %s\n", es.Relation, c.SplitSeed,
		len(es.Src[0]), len(es.Src[1]), len(es.Src[2]), kind, filepath.Join(target, split.EdgeSplitDir))
	return nil
}
