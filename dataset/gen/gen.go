package gen

import (
	"fmt"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/progress"
)

// ProgressUnits is the total Generate adds to its progress bar: one unit
// per node for each pass over the nodes. Create the bar with it.
func (c *Config) ProgressUnits() int64 {
	passes := int64(7)
	if c.FeatDim > 0 {
		passes++
	}
	return passes * c.NumNodes
}

// Generate builds the dataset described by cfg in memory. The result is a
// pure function of cfg (seed included), whatever GOMAXPROCS is. bar may be
// nil; otherwise Generate adds cfg.ProgressUnits() units to it and
// describes each stage, and the caller finishes it.
func Generate(cfg Config, bar *progress.Bar) (*dataset.Dataset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stage := func(s string) { bar.Describe(fmt.Sprintf("gen %s: %s", cfg.Name, s)) }

	stage("degrees and classes")
	p := plant(&cfg, bar)
	stage("edges")
	off, tgt, err := drawTargets(&cfg, p, bar)
	if err != nil {
		return nil, err
	}
	p.weight, p.nodes = nil, nil // no longer needed; let the GC take them
	stage("CSR")
	g, err := buildCSR(cfg.NumNodes, off, tgt, bar)
	if err != nil {
		return nil, err
	}
	off, tgt = nil, nil
	stage("features")
	x := features(&cfg, p.label, bar)
	train, val, test := splits(&cfg)
	return &dataset.Dataset{
		Name:       cfg.Name,
		Graph:      g,
		Directed:   false,
		FeatDim:    cfg.FeatDim,
		Features:   x,
		NumClasses: cfg.NumClasses,
		Labels:     p.label,
		Train:      train,
		Val:        val,
		Test:       test,
	}, nil
}
