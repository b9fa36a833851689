package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/internal/progress"
)

// genCmd is 'strata gen DST': a synthetic dataset from a preset, with any
// field overridden by a flag.
type genCmd struct {
	Dst string `arg:"" help:"Output Strata dataset directory (must not exist unless --overwrite)." type:"path"`

	Preset    string   `help:"Starting configuration: ${presets}; or hetero, a typed dataset (3 node types, 4 relations) whose classes only the edge types separate." default:"small"`
	Scale     float64  `help:"Multiply the preset's node count by this factor (degree cap scaled by its square root)." default:"1"`
	Name      *string  `help:"Dataset name (default: the preset's)."`
	Seed      *uint64  `help:"Generator seed; the output is a pure function of the configuration."`
	Nodes     *int64   `help:"Number of nodes."`
	AvgDegree *float64 `help:"Expected mean degree (stored edges per node) before deduplication."`
	MaxDegree *float64 `help:"Cap on a node's expected degree."`
	Exponent  *float64 `help:"Power-law exponent of the expected degrees."`
	Classes   *int     `help:"Number of classes."`
	Skew      *float64 `name:"class-skew" help:"Class k's share is proportional to (k+1)^-skew."`
	Homophily *float64 `help:"Fraction of edges whose endpoints share a class."`
	Features  *int     `help:"Feature dimension (0: no features)."`
	Noise     *float64 `help:"Norm of the Gaussian noise around each class centroid."`
	Train     *float64 `name:"train-frac" help:"Probability that a node is a training node."`
	Val       *float64 `name:"val-frac" help:"Probability that a node is a validation node."`
	Test      *float64 `name:"test-frac" help:"Probability that a node is a test node."`
	Overwrite bool     `help:"Replace an existing dataset directory at DST."`
}

// config returns the preset with the flags applied.
func (c *genCmd) config() (gen.Config, error) {
	cfg, err := gen.Preset(c.Preset)
	if err != nil {
		return cfg, usageError{err}
	}
	if c.Scale != 1 {
		if cfg, err = cfg.Scaled(c.Scale); err != nil {
			return cfg, genFlag(err)
		}
	}
	set := func(dst, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	if c.Name != nil {
		cfg.Name = *c.Name
	}
	if c.Seed != nil {
		cfg.Seed = *c.Seed
	}
	if c.Nodes != nil {
		cfg.NumNodes = *c.Nodes
	}
	if c.Classes != nil {
		cfg.NumClasses = *c.Classes
	}
	if c.Features != nil {
		cfg.FeatDim = *c.Features
	}
	set(&cfg.AvgDegree, c.AvgDegree)
	set(&cfg.MaxDegree, c.MaxDegree)
	set(&cfg.Exponent, c.Exponent)
	set(&cfg.ClassSkew, c.Skew)
	set(&cfg.Homophily, c.Homophily)
	set(&cfg.Noise, c.Noise)
	set(&cfg.TrainFrac, c.Train)
	set(&cfg.ValFrac, c.Val)
	set(&cfg.TestFrac, c.Test)
	// Refuse what does not fit in the memory the machine has left, not
	// only what exceeds gen.DefaultMaxBytes.
	if b, ok := memoryBudget(); ok && b.Bytes < gen.DefaultMaxBytes {
		cfg.MaxBytes = max(b.Bytes, 1)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, genFlag(err)
	}
	return cfg, nil
}

func (c *genCmd) Run(e *env) error {
	if c.Preset == gen.HeteroPresetName {
		return c.runHetero(e) // typed (hetero.go)
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.Dst), 0o755); err != nil {
		return err
	}
	start := time.Now()
	bar := progress.New(cfg.ProgressUnits(), "gen "+cfg.Name)
	ds, err := gen.Generate(cfg, bar)
	bar.Finish()
	if err != nil {
		return err
	}
	if err := dataset.Write(c.Dst, ds, dataset.WriteOptions{Overwrite: c.Overwrite, Quiet: e.quiet}); err != nil {
		return err
	}
	s, err := dataset.Info(c.Dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "generated %s (seed %d) into %s in %.1fs\n", cfg.Name, cfg.Seed, c.Dst, time.Since(start).Seconds())
	fmt.Fprint(e.stdout, s.String())
	return nil
}
