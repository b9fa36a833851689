package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/link/multi"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Tasks of 'strata train'.
const (
	taskNode = "node"
	taskLink = "link"
)

// linkFlags are the flags of 'strata train --task link' (package link),
// embedded in trainCmd. Unset flags take link.Defaults of the model.
type linkFlags struct {
	Task        string `help:"Task: node (node classification) or link (link prediction: edge splits, negative sampling, AUC/MRR/Hits@K; see --split-edges)." enum:"node,link" default:"node"`
	SplitEdges  string `name:"split-edges" help:"link: train,val,test fractions of the edges, split at random with --seed; held-out edges leave the message-passing graph, both directions when the graph is undirected (default 0.85,0.05,0.10; a dataset directory's stored edge_split/ is used instead, and giving this flag too is an error)." placeholder:"T,V,T"`
	NegRatio    *int   `name:"neg-ratio" help:"link: negative edges drawn per positive training edge (default 1)."`
	NegSampling string `name:"neg-sampling" help:"link: distribution of the negatives' destinations: uniform, or degree (in-degree^0.75) (default uniform)." placeholder:"uniform|degree"`
	NegExclude  bool   `name:"neg-exclude" help:"link: redraw training negatives that are training edges or self-pairs."`
	Decoder     string `help:"link: pair scorer: dot (inner product of the embeddings) or mlp (MLP on their elementwise product) (default dot)." placeholder:"dot|mlp"`
	HitsK       *int   `name:"hits-k" help:"link: K of the Hits@K metric (default 50, OGB's ogbl-collab)." placeholder:"K"`
	Relation    string `name:"link-relation" help:"link, --model rgcn or hsage: the typed dataset's relation whose links are predicted: SRC,REL,DST, src___rel___dst, PyG's src__rel__dst, or REL alone when no other relation has that name." placeholder:"SRC,REL,DST"`
}

// set names the link flags given in a node-classification run.
func (f *linkFlags) set() []string {
	var out []string
	add := func(on bool, name string) {
		if on {
			out = append(out, name)
		}
	}
	add(f.SplitEdges != "", "split-edges")
	add(f.NegRatio != nil, "neg-ratio")
	add(f.NegSampling != "", "neg-sampling")
	add(f.NegExclude, "neg-exclude")
	add(f.Decoder != "", "decoder")
	add(f.HitsK != nil, "hits-k")
	add(f.Relation != "", "link-relation")
	return out
}

// validate checks the link flags' values (kong's Validate hook).
func (f *linkFlags) validate() error {
	if f.SplitEdges != "" {
		if _, err := link.ParseFractions(f.SplitEdges); err != nil {
			return configFlag(err)
		}
	}
	switch f.NegSampling {
	case "", link.NegUniform, link.NegDegree:
	default:
		return usageError{fmt.Errorf("--neg-sampling %q: want uniform or degree", f.NegSampling)}
	}
	switch f.Decoder {
	case "", link.DecoderDot, link.DecoderMLP:
	default:
		return usageError{fmt.Errorf("--decoder %q: want dot or mlp", f.Decoder)}
	}
	return firstError(optInt("neg-ratio", f.NegRatio, 1, link.MaxNegRatio), optInt("hits-k", f.HitsK, 1, link.MaxHitsK))
}

// linkConfig is the configuration of 'strata train --task link': the
// model's link defaults under the common flags and the link flags.
func (c *trainCmd) linkConfig() (link.Config, error) {
	cfg := link.Defaults(c.Model)
	com, err := c.commonFrom(cfg.Common)
	if err != nil {
		return cfg, err
	}
	cfg.Common = com
	switch c.Mode {
	case "":
		if strings.TrimSpace(c.FullGraph.Devices) != "" && cfg.Mode == train.Full {
			// Several devices without --mode: the DSP engine's sampled
			// mini-batches, with sage's batches.
			cfg.Mode, cfg.BatchSize = train.Sampled, link.Defaults(train.SAGE).BatchSize
		}
	case fullGraphMode:
		cfg.Mode, cfg.BatchSize = train.Full, 0 // one step per epoch on every training link
	default:
		cfg.Mode = c.Mode
	}
	if c.BatchSize != nil {
		cfg.BatchSize = *c.BatchSize
	}
	if c.Fanouts != nil || len(cfg.Fanouts) != com.Layers {
		cfg.Fanouts = c.fanouts(com.Layers)
	}
	f := &c.Link
	if f.SplitEdges != "" {
		if cfg.Split, err = link.ParseFractions(f.SplitEdges); err != nil {
			return cfg, configFlag(err)
		}
	}
	setInt(&cfg.NegRatio, f.NegRatio)
	setInt(&cfg.HitsK, f.HitsK)
	if f.NegSampling != "" {
		cfg.NegSample = f.NegSampling
	}
	if f.Decoder != "" {
		cfg.Decoder = f.Decoder
	}
	cfg.NegExclude = f.NegExclude
	if err := cfg.Validate(); err != nil {
		return cfg, configFlag(err)
	}
	return cfg, nil
}

// runLink is 'strata train --task link': link prediction on one device
// (sampled or whole-graph, package link), on several devices in the DSP
// engine (--devices, sampled) or with the full-graph trainer (--mode
// fullgraph), package link/multi.
func (c *trainCmd) runLink(e *env) error {
	refuse := func(flag, why string) error {
		return usageError{fmt.Errorf("--%s: %s", flag, why)}
	}
	if err := c.checkTypedFlags(); err != nil {
		return err
	}
	fg := c.Mode == fullGraphMode
	dsp := !fg && strings.TrimSpace(c.FullGraph.Devices) != ""
	switch {
	case c.Checkpoint != "":
		return refuse("checkpoint", "--task link does not checkpoint yet (a run starts afresh)")
	case c.Resume:
		return refuse("resume", "--task link does not checkpoint yet (a run starts afresh)")
	case c.CheckpointEvery != 0:
		return refuse("checkpoint-every", "--task link does not checkpoint yet (a run starts afresh)")
	case c.Plot != "":
		return refuse("plot", "--task link draws no plot yet; --report has every epoch's loss and metrics")
	case c.Save != "" && fg:
		return refuse("save", "--task link --mode fullgraph does not export its model yet; train on one device (--mode full or sampled) or with --devices (DSP) to save it")
	case c.FullGraph.Partition != "multilevel" && !fg && !dsp:
		return refuse("partition", "applies to runs on several devices")
	case fg && c.FullGraph.PartFile != "":
		return refuse("partition-file", "--task link partitions the message-passing graph itself")
	}
	if job, err := inJob(); err != nil {
		return err
	} else if job {
		return refuse("task", "link prediction runs in one process (its devices: --devices); a job of several processes is not built for it yet")
	}
	if train.IsHetero(c.Model) {
		return c.runHeteroLink(e) // typed datasets (hetero_link.go)
	}
	if c.Link.Relation != "" {
		return refuse("link-relation", fmt.Sprintf("names a relation of a typed dataset: it applies to --model rgcn or hsage, not %s", c.Model))
	}
	if set := c.FullGraph.set(); len(set) > 0 && !fg {
		return refuse(set[0], "applies to --mode fullgraph only")
	}
	if set := c.FullGraph.commSet(); len(set) > 0 && !fg && !dsp {
		return refuse(set[0], "applies to several devices (--devices, or --mode fullgraph)")
	}
	if set := c.DSP.set(); len(set) > 0 && !dsp {
		return refuse(set[0], "applies to sampled training on several devices (--devices) only")
	}
	cfg, err := c.linkConfig()
	if err != nil {
		return err
	}
	stored, err := c.storedEdgeSplit()
	if err != nil {
		return err
	}
	var fcfg fullgraph.Config
	var ecfg engine.Config
	var set deviceSet
	switch {
	case fg:
		if fcfg, err = c.fullGraphConfig(false); err != nil {
			return err
		}
	case dsp:
		if set, err = parseDevices(c.FullGraph.Devices); err != nil {
			return err
		}
		tc := train.Config{Common: cfg.Common, Mode: cfg.Mode, BatchSize: cfg.BatchSize, Fanouts: cfg.Fanouts}
		if ecfg, err = c.dspConfigOf(tc, len(set.Specs)); err != nil {
			return err
		}
	}
	if err := c.checkOutputs(); err != nil {
		return err
	}
	keep, err := c.checkSave()
	if err != nil {
		return err
	}
	var log io.Writer = e.stderr
	if e.quiet {
		log = nil
	}
	ds, closeDS, err := openDataset(c.Dataset, e.quiet)
	if err != nil {
		return err
	}
	defer closeDS()
	var es *split.EdgeSplit
	if stored {
		if es, err = split.ReadEdges(c.Dataset, ds); err != nil {
			return err
		}
		if log != nil {
			fmt.Fprintf(log, "edge split: %s (seed %d): %d train, %d validation, %d test links\n", filepath.Join(c.Dataset, split.EdgeSplitDir),
				es.Seed, len(es.Src[0]), len(es.Src[1]), len(es.Src[2]))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var rep *link.Report
	switch {
	case fg:
		rep, err = c.linkFullGraph(ctx, ds, cfg, fcfg, es, log)
	case dsp:
		rep, err = c.linkDSP(ctx, ds, cfg, ecfg, set, es, keep, log)
	default:
		rep, err = c.linkOne(ctx, ds, cfg, es, keep, log)
	}
	var ce *train.ConfigError
	if errors.As(err, &ce) {
		return configFlag(err)
	}
	if err != nil {
		return err
	}
	printLinkReport(e, rep, start)
	storage := storageOf(ds.Features) // link.Run's train.NewFeatures
	if dsp {
		storage = model.Dense // the engine's rows are dense
	}
	if err := c.saveLinkModel(e, keep, ds, rep, storage); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, nil)
}

// linkOne trains on the one device of --device (package link).
func (c *trainCmd) linkOne(ctx context.Context, ds *dataset.Dataset, cfg link.Config, es *split.EdgeSplit, keep *train.Keeper, log io.Writer) (*link.Report, error) {
	b, err := openDeviceNote(c.Device, log)
	if err != nil {
		return nil, err
	}
	if onHost([]backend.Backend{b}) {
		if err := checkMemory(link.EstimateMemory(cfg, shapeOf(ds)), "", nil); err != nil {
			return nil, err
		}
	}
	if log != nil {
		fmt.Fprintf(log, "training link prediction with %s on %s (%d nodes, %d edges, %d features) on %s\n",
			cfg.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, b.Name())
		fmt.Fprintf(log, "config: %s\n", cfg.String())
	}
	return link.Run(ctx, ds, cfg, link.Options{Backend: b, Log: log, EdgeSplit: es, Keep: keep})
}

// linkDSP trains on the devices of --devices in the DSP engine
// (link/multi.RunDSP).
func (c *trainCmd) linkDSP(ctx context.Context, ds *dataset.Dataset, cfg link.Config, ecfg engine.Config, set deviceSet, es *split.EdgeSplit, keep *train.Keeper, log io.Writer) (*link.Report, error) {
	bs, err := set.open(false)
	if err != nil {
		return nil, err
	}
	if err := c.checkCUDAFlags(bs); err != nil {
		return nil, err
	}
	gso, _, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{})
	if err != nil {
		return nil, usageError{err}
	}
	if onHost(bs) {
		if err := checkMemory(link.EstimateMemory(cfg, shapeOf(ds)), c.FullGraph.Devices, log); err != nil {
			return nil, err
		}
	}
	if log != nil {
		fmt.Fprintf(log, "training link prediction with %s on %s (%d nodes, %d edges, %d features) on %d devices (%s), DSP %s-wise sampling\n",
			cfg.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, len(bs), bs[0].Name(), ecfg.Scheme)
		fmt.Fprintf(log, "config: %s (each step's links shared by the devices)\n", cfg.String())
	}
	rep, _, err := multi.RunDSP(ctx, ds, cfg, ecfg, engine.Options{Backends: bs, Log: log, GPUShm: gso, Start: processStart, Keep: keep}, es)
	var ce *engine.ConfigError
	if errors.As(err, &ce) {
		return nil, configFlag(err)
	}
	return rep, err
}

// linkFullGraph trains with the full-graph trainer on the devices of
// --devices (or --device) (link/multi.RunFullGraph).
func (c *trainCmd) linkFullGraph(ctx context.Context, ds *dataset.Dataset, cfg link.Config, fcfg fullgraph.Config, es *split.EdgeSplit, log io.Writer) (*link.Report, error) {
	bs, err := openDevices(c.FullGraph.Devices, c.Device, log)
	if err != nil {
		return nil, err
	}
	gso, _, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{})
	if err != nil {
		return nil, usageError{err}
	}
	commTimeout, err := c.commTimeout()
	if err != nil {
		return nil, err
	}
	gpu := !onHost(bs)
	if c.FullGraph.Masks == "auto" {
		fcfg.Masks = fullgraph.MasksGlobal
		if gpu {
			fcfg.Masks = fullgraph.MasksLocal
		}
	}
	switch c.FullGraph.NodeOrder {
	case "auto":
		if gpu {
			fcfg.Order = fullgraph.OrderDegree
		}
	default:
		fcfg.Order = c.FullGraph.NodeOrder
	}
	if onHost(bs) {
		if err := checkMemory(link.EstimateMemory(cfg, shapeOf(ds)), c.FullGraph.Devices, log); err != nil {
			return nil, err
		}
	}
	dcs, kind, why, err := c.fullGraphComms(ctx, nil, bs, gso, commTimeout)
	var fce *fullgraph.ConfigError
	if errors.As(err, &fce) {
		return nil, usageError{err}
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, dc := range dcs {
			dc.Close()
		}
	}()
	if log != nil {
		fmt.Fprintf(log, "training link prediction with %s on %s (%d nodes, %d edges, %d features) on %d device(s) (%s), full-graph\n",
			cfg.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, len(bs), bs[0].Name())
		fmt.Fprintf(log, "config: %s\n", cfg.String())
		if len(bs) > 1 {
			fmt.Fprintf(log, "communication: %s (%s)\n", kind, why)
		}
	}
	rep, _, err := multi.RunFullGraph(ctx, ds, cfg, fcfg, fullgraph.Options{Backends: bs, Log: log, DeviceComms: dcs, CommTimeout: commTimeout}, es)
	if errors.As(err, &fce) {
		return nil, configFlag(err)
	}
	return rep, err
}

// storedEdgeSplit reports whether --dataset is a directory with a stored
// edge split (DATASET/edge_split, from 'strata split' or 'strata import
// --edge-split'), which --task link uses instead of splitting; giving
// --split-edges too is a usage error naming both.
func (c *trainCmd) storedEdgeSplit() (bool, error) {
	dir := filepath.Join(c.Dataset, split.EdgeSplitDir)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false, nil
	}
	if c.Link.SplitEdges != "" {
		return false, usageError{fmt.Errorf("--split-edges %s: --dataset %s has a stored edge split (%s), which --task link uses; drop --split-edges, or remake the stored one with 'strata split --edge-split'",
			c.Link.SplitEdges, c.Dataset, dir)}
	}
	return true, nil
}

// printLinkReport prints a link run's headline metrics (typed runs too).
func printLinkReport(e *env, rep *link.Report, start time.Time) {
	sel := "best validation AUC"
	if rep.Selection == train.SelectLast {
		sel = "last"
	}
	fmt.Fprintf(e.stdout, "links               %d train, %d validation, %d test (%s)\n", rep.Split.Train, rep.Split.Val, rep.Split.Test, splitSource(rep.Split))
	fmt.Fprintf(e.stdout, "validation          %s\n", link.MetricsLine(rep.Val, rep.HitsK))
	fmt.Fprintf(e.stdout, "test                %s  (epoch %d of %d, %s; last epoch: val auc %.4f, test auc %.4f)\n",
		link.MetricsLine(rep.Test, rep.HitsK), rep.SelectedEpoch, len(rep.Epochs), sel, rep.LastVal.AUC, rep.LastTest.AUC)
	on := rep.Device
	if rep.Engine != "" {
		on = fmt.Sprintf("%d device(s) (%s), %s", rep.Devices, rep.Device, rep.Engine)
	}
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", time.Since(start).Seconds(), on)
}

func splitSource(s link.Stats) string {
	if s.Source == link.SourceStored {
		return undirected(s.Undirected) + "; the dataset's edge_split/"
	}
	return undirected(s.Undirected)
}

func undirected(u bool) string {
	if u {
		return "undirected: both directions held out"
	}
	return "directed"
}
