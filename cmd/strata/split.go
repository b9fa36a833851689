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
}

// Validate is kong's hook for 'strata split'.
func (c *splitCmd) Validate() error {
	if err := c.splitFlags.validate(); err != nil {
		return err
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
