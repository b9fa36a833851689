package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Typed (heterogeneous) datasets on the command line: train --model
// rgcn|hsage, gen --preset hetero, import of the typed layouts, info of
// a format version 2 directory. Each is entered from its command's Run
// by one call, so the homogeneous paths stay as they were.

// checkTypedFlags refuses the typed-only flags for homogeneous models.
func (c *trainCmd) checkTypedFlags() error {
	if train.IsHetero(c.Model) {
		return nil
	}
	switch {
	case len(c.RelFanouts) > 0:
		return usageError{fmt.Errorf("--rel-fanouts applies to --model rgcn or hsage (typed datasets)")}
	case c.AddReverse:
		return usageError{fmt.Errorf("--add-reverse applies to --model rgcn or hsage (typed datasets)")}
	}
	return nil
}

// heteroConfig turns the flags into train.HeteroConfig on top of
// train.HeteroDefaults, refusing the flags typed training does not read.
// --devices is typed node classification's (runHeteroDevices).
func (c *trainCmd) heteroConfig() (train.HeteroConfig, error) {
	if err := c.checkHeteroComm(); err != nil {
		return train.HeteroConfig{}, err
	}
	return c.heteroConfigFrom(train.HeteroDefaults(c.Model), true)
}

// heteroConfigFrom is heteroConfig on top of defaults cfg (typed link
// prediction's are link.HeteroDefaults'); devices says whether --devices
// applies.
func (c *trainCmd) heteroConfigFrom(cfg train.HeteroConfig, devices bool) (train.HeteroConfig, error) {
	refuse := func(flag string) error {
		return usageError{fmt.Errorf("--%s does not apply to --model %s (typed training: sampled mini-batches on --device, or on --devices)", flag, c.Model)}
	}
	switch {
	case c.FullGraph.Devices != "" && !devices:
		return train.HeteroConfig{}, usageError{fmt.Errorf("--devices: typed link prediction (--task link --model %s) trains on one device (--device); typed node classification takes --devices", c.Model)}
	case c.FullGraph.Devices == "" && len(c.FullGraph.commSet()) > 0:
		return train.HeteroConfig{}, usageError{fmt.Errorf("--%s needs several devices: --devices", c.FullGraph.commSet()[0])}
	case c.Mode != "" && c.Mode != train.Sampled:
		return train.HeteroConfig{}, refuse("mode " + c.Mode)
	case c.Heads != nil:
		return train.HeteroConfig{}, refuse("heads")
	case c.OutHeads != nil:
		return train.HeteroConfig{}, refuse("out-heads")
	case c.AttnDrop != nil:
		return train.HeteroConfig{}, refuse("attn-dropout")
	case c.RowNorm != nil && *c.RowNorm == train.RowNormOn:
		return train.HeteroConfig{}, refuse("row-norm on")
	case c.Checkpoint != "" || c.Resume || c.CheckpointEvery != 0:
		return train.HeteroConfig{}, usageError{fmt.Errorf("--checkpoint, --resume and --checkpoint-every are not supported for --model %s yet", c.Model)}
	case c.FullGraph.Partition != "multilevel":
		return train.HeteroConfig{}, usageError{fmt.Errorf("--partition does not apply to --model %s: typed --devices split every node type into equal ID ranges", c.Model)}
	}
	if set := c.FullGraph.set(); len(set) > 0 {
		return train.HeteroConfig{}, refuse(set[0])
	}
	for _, f := range c.DSP.set() {
		if f != "replace" && f != "weighted" {
			return train.HeteroConfig{}, refuse(f)
		}
	}
	setInt(&cfg.Layers, c.Layers)
	setInt(&cfg.Hidden, c.Hidden)
	setInt(&cfg.Epochs, c.Epochs)
	setInt(&cfg.BatchSize, c.BatchSize)
	setFloat(&cfg.Dropout, c.Dropout)
	setFloat(&cfg.LR, c.LR)
	setFloat(&cfg.WeightDecay, c.WeightDec)
	cfg.Optimizer, cfg.Momentum = c.Optimizer, c.Momentum
	cfg.EvalEvery, cfg.Eval, cfg.EvalBatchSize, cfg.Select, cfg.Seed = c.FullGraph.EvalEvery, c.Eval, c.EvalBatch, c.Select, c.Seed
	cfg.Fanouts = c.fanouts(cfg.Layers)
	cfg.EvalFanouts = c.EvalFan
	if cfg.EvalFanouts == nil && cfg.Eval == train.Sampled {
		cfg.EvalFanouts = cfg.Fanouts
	}
	cfg.Replace, cfg.Weighted, cfg.AddReverse = c.DSP.Replace, c.DSP.Weighted, c.AddReverse
	rf, err := parseRelFanouts(c.RelFanouts)
	if err != nil {
		return cfg, err
	}
	cfg.RelFanouts = rf
	if err := cfg.Validate(); err != nil {
		return cfg, configFlag(err)
	}
	return cfg, nil
}

// parseRelFanouts reads --rel-fanouts. Kong (and a config file's list)
// split the values at commas, so "writes=5,5,cites=3,0" arrives as
// writes=5, 5, cites=3, 0: an item with '=' starts a relation, the items
// after it are its further fanouts.
func parseRelFanouts(items []string) (map[string][]int, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := map[string][]int{}
	name := ""
	for _, it := range items {
		it = strings.TrimSpace(it)
		val := it
		if n, v, ok := strings.Cut(it, "="); ok {
			if n == "" {
				return nil, usageError{fmt.Errorf("--rel-fanouts %q: want REL=F1,F2,... (REL a relation's name or src___rel___dst)", truncateFlag(it))}
			}
			if _, dup := out[n]; dup {
				return nil, usageError{fmt.Errorf("--rel-fanouts: %s given twice", truncateFlag(n))}
			}
			name, val = n, v
		} else if name == "" {
			return nil, usageError{fmt.Errorf("--rel-fanouts %q: want REL=F1,F2,... (REL a relation's name or src___rel___dst)", truncateFlag(it))}
		}
		k, err := strconv.Atoi(val)
		if err != nil || k < -1 || k > train.MaxFanout || len(out[name]) >= train.MaxLayers {
			return nil, usageError{fmt.Errorf("--rel-fanouts %s: want at most %d fanouts, each in 0..%d or -1 (got %q)", truncateFlag(name), train.MaxLayers, train.MaxFanout, truncateFlag(val))}
		}
		out[name] = append(out[name], k)
	}
	return out, nil
}

func truncateFlag(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// openHetero resolves --dataset for a typed model: a typed dataset
// directory (format version 2) or a typed layout the importer reads.
func openHetero(spec string, quiet bool) (*dataset.Hetero, func(), error) {
	noop := func() {}
	if slices.Contains(builtinNames, spec) {
		return nil, noop, usageError{fmt.Errorf("--dataset %s is a built-in homogeneous dataset; rgcn and hsage train typed datasets (strata gen DIR --preset hetero, or strata import of a typed layout)", spec)}
	}
	if _, err := os.Stat(spec); err != nil {
		return nil, noop, usageError{fmt.Errorf("--dataset %q is not a readable path: %w", spec, err)}
	}
	isDir, err := hasManifest(spec)
	if err != nil {
		return nil, noop, err
	}
	if isDir {
		v, err := dataset.ManifestVersion(spec)
		if err != nil {
			return nil, noop, err
		}
		if v != dataset.FormatVersionHetero {
			return nil, noop, usageError{fmt.Errorf("--dataset %s is a format version %d (homogeneous) dataset; rgcn and hsage train typed datasets (format version %d): use --model sage, gcn or gat", spec, v, dataset.FormatVersionHetero)}
		}
		h, err := dataset.OpenHetero(spec, dataset.OpenOptions{Quiet: quiet})
		if err != nil {
			return nil, noop, err
		}
		return h, func() { h.Close() }, nil
	}
	kind, err := importer.Detect(spec)
	if err != nil {
		return nil, noop, fmt.Errorf("--dataset %s: no %s and not importable: %w", spec, dataset.ManifestFile, err)
	}
	if !importer.IsTyped(kind) {
		return nil, noop, usageError{fmt.Errorf("--dataset %s is a homogeneous %s layout; rgcn and hsage train typed layouts (%v)", spec, kind, importer.TypedKinds())}
	}
	h, err := importer.LoadHetero(kind, spec, importer.Options{Quiet: quiet})
	if err != nil {
		return nil, noop, err
	}
	return h, noop, nil
}

// openHeteroRun opens what every typed run starts from: the outputs
// checked, the log (nil when quiet), the device and the typed dataset
// (closeDS releases it; set whenever err is nil).
func (c *trainCmd) openHeteroRun(e *env) (log io.Writer, b backend.Backend, h *dataset.Hetero, closeDS func(), err error) {
	if err = c.checkOutputs(); err != nil {
		return nil, nil, nil, nil, err
	}
	if !e.quiet {
		log = e.stderr
	}
	if b, err = openDeviceNote(c.Device, log); err != nil {
		return nil, nil, nil, nil, err
	}
	if h, closeDS, err = openHetero(c.Dataset, e.quiet); err != nil {
		return nil, nil, nil, nil, err
	}
	return log, b, h, closeDS, nil
}

// checkHeteroComm checks --comm and --comm-timeout for typed
// --devices: the sampled kinds of engine.CommKinds (not fullgraph's
// host), gpushm's flags only with gpushm.
func (c *trainCmd) checkHeteroComm() error {
	f := &c.FullGraph
	if f.Devices == "" {
		if c.World.CommTimeout != "" {
			return usageError{fmt.Errorf("--comm-timeout needs several devices: --devices")}
		}
		return nil
	}
	if !slices.Contains(engine.CommKinds, f.Comm) {
		return usageError{fmt.Errorf("--comm %s applies to --mode fullgraph; typed --devices take %s", f.Comm, strings.Join(engine.CommKinds, ", "))}
	}
	if set := f.GPUShm.Set(); len(set) > 0 && f.Comm != comm.KindGPUShm {
		return usageError{fmt.Errorf("--%s applies to --comm gpushm, not --comm %s", set[0], f.Comm)}
	}
	return nil
}

// logHeteroRun writes the lines that open a typed run's log: the data,
// the devices (on), the configuration.
func logHeteroRun(log io.Writer, h *dataset.Hetero, cfg train.HeteroConfig, on string) {
	fmt.Fprintf(log, "training %s on %s (%d nodes in %d types, %d edges in %d relations, target %s, %d classes) on %s\n",
		cfg.Model, h.Name, h.NumNodes(), len(h.NodeTypes), h.NumEdges(), len(h.EdgeTypes), targetName(h), h.NumClasses, on)
	fmt.Fprintf(log, "config: %s %s, %s, batch %d, fanouts %v per relation", cfg.Model, train.Sampled, cfg.Common.Layout(), cfg.BatchSize, cfg.Fanouts)
	for _, name := range slices.Sorted(maps.Keys(cfg.RelFanouts)) {
		fmt.Fprintf(log, ", %s %v", name, cfg.RelFanouts[name])
	}
	fmt.Fprintf(log, ", %s\n", cfg.Common.Schedule())
}

// runHetero is 'strata train --model rgcn|hsage'.
func (c *trainCmd) runHetero(e *env) error {
	cfg, err := c.heteroConfig()
	if err != nil {
		return err
	}
	keep, err := c.checkSave()
	if err != nil {
		return err
	}
	if c.FullGraph.Devices != "" {
		return c.runHeteroDevices(e, cfg, keep)
	}
	log, b, h, closeDS, err := c.openHeteroRun(e)
	if err != nil {
		return err
	}
	defer closeDS()
	if log != nil {
		logHeteroRun(log, h, cfg, b.Name())
		if typedSampler(b) != nil {
			fmt.Fprintf(log, "sampling typed batches on %s\n", b.Name())
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := train.RunHetero(ctx, h, cfg, train.Options{Backend: b, Log: log, TypedSampler: typedSampler(b), Keep: keep})
	var ce *train.ConfigError
	if errors.As(err, &ce) {
		return configFlag(err)
	}
	if err != nil {
		return err
	}
	printAccuracy(e, rep.Report)
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", time.Since(start).Seconds(), rep.Device)
	if err := c.saveTypedModel(e, keep, h, cfg); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, rep.Report)
}

// runHeteroDevices is 'strata train --model rgcn|hsage --devices LIST':
// typed training data parallel over the devices (engine.RunHetero), the
// batches drawn by the collective typed sampler.
func (c *trainCmd) runHeteroDevices(e *env, cfg train.HeteroConfig, keep *train.Keeper) error {
	set, err := parseDevices(c.FullGraph.Devices)
	if err != nil {
		return err
	}
	timeout, err := c.commTimeout()
	if err != nil {
		return err
	}
	gso, _, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{}) // the flags, then STRATA_GPUSHM_*
	if err != nil {
		return usageError{err}
	}
	if err := c.checkOutputs(); err != nil {
		return err
	}
	bs, err := set.open(false)
	if err != nil {
		return err
	}
	if err := c.checkCUDAFlags(bs); err != nil {
		return err
	}
	var log io.Writer
	if !e.quiet {
		log = e.stderr
	}
	h, closeDS, err := openHetero(c.Dataset, e.quiet)
	if err != nil {
		return err
	}
	defer closeDS()
	if log != nil {
		devs := fmt.Sprintf("%d devices", len(bs))
		if len(bs) == 1 {
			devs = "1 device"
		}
		logHeteroRun(log, h, cfg, fmt.Sprintf("%s (%s), collective typed sampling", devs, bs[0].Name()))
		fmt.Fprintf(log, "each device: its share of every epoch's training nodes in batches of %d, evaluation on device 0 every %d epoch(s) and after the last\n",
			cfg.BatchSize, cfg.EvalEvery)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := engine.RunHetero(ctx, h, cfg, engine.HeteroOptions{Backends: bs, Comm: c.FullGraph.Comm, CommTimeout: timeout,
		GPUShm: gso, Log: log, EvalSampler: typedSampler(bs[0]), Keep: keep})
	var ce *train.ConfigError
	var ee *engine.ConfigError
	if errors.As(err, &ce) || errors.As(err, &ee) {
		return configFlag(err)
	}
	if err != nil {
		return err
	}
	printAccuracy(e, rep.Report)
	fmt.Fprintf(e.stdout, "epoch time          %.3fs (training only, mean of epochs after the first; %d batches per device)\n",
		rep.Multi.SteadyEpochSeconds, rep.Multi.BatchesPerDevice)
	fmt.Fprintf(e.stdout, "time                %.1fs on %s x%d (comm %s)\n", time.Since(start).Seconds(), rep.Device, rep.Multi.Devices, rep.Multi.Comm)
	if err := c.saveTypedModel(e, keep, h, cfg); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, rep.Report)
}

func targetName(h *dataset.Hetero) string {
	if h.Labels == nil || h.Target < 0 || h.Target >= len(h.NodeTypes) {
		return "none"
	}
	return h.NodeTypes[h.Target].Name
}

// runHetero is 'strata gen --preset hetero'. The flags that have a
// meaning there are mapped onto gen.HeteroConfig; the others are refused.
func (c *genCmd) runHetero(e *env) error {
	refused := []struct {
		set  bool
		flag string
	}{{c.AvgDegree != nil, "avg-degree"}, {c.MaxDegree != nil, "max-degree"}, {c.Exponent != nil, "exponent"},
		{c.Skew != nil, "class-skew"}, {c.Homophily != nil, "homophily"}}
	for _, r := range refused {
		if r.set {
			return usageError{fmt.Errorf("--%s does not apply to --preset %s (typed: 3 node types, 4 relations)", r.flag, gen.HeteroPresetName)}
		}
	}
	cfg := gen.HeteroPreset()
	if c.Name != nil {
		cfg.Name = *c.Name
	}
	if c.Seed != nil {
		cfg.Seed = *c.Seed
	}
	if c.Nodes != nil {
		cfg.Papers = *c.Nodes
	}
	if c.Scale != 1 {
		cfg.Papers = int64(float64(cfg.Papers) * c.Scale)
	}
	if c.Classes != nil {
		if *c.Classes%2 != 0 {
			return usageError{fmt.Errorf("--classes %d: the hetero preset plants classes in pairs, want an even number", *c.Classes)}
		}
		cfg.Pairs = *c.Classes / 2
	}
	if c.Features != nil {
		cfg.OtherDim, cfg.PaperDim = *c.Features, max(1, *c.Features/2)
	}
	for _, p := range []struct {
		dst *float64
		v   *float64
	}{{&cfg.Noise, c.Noise}, {&cfg.TrainFrac, c.Train}, {&cfg.ValFrac, c.Val}, {&cfg.TestFrac, c.Test}} {
		if p.v != nil {
			*p.dst = *p.v
		}
	}
	if err := cfg.Validate(); err != nil {
		var ce *gen.ConfigError
		if errors.As(err, &ce) {
			if flag, ok := heteroGenFlags[ce.Field]; ok {
				return usageError{fmt.Errorf("%s: %s", flag, ce.Msg)}
			}
		}
		return usageError{err}
	}
	start := time.Now()
	h, err := gen.GenerateHetero(cfg)
	if err != nil {
		return err
	}
	if err := dataset.WriteHetero(c.Dst, h, dataset.WriteOptions{Overwrite: c.Overwrite, Quiet: e.quiet}); err != nil {
		return err
	}
	s, err := dataset.HeteroInfo(c.Dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "generated %s (seed %d) into %s in %.1fs\n", cfg.Name, cfg.Seed, c.Dst, time.Since(start).Seconds())
	fmt.Fprint(e.stdout, s.String())
	return nil
}

// heteroGenFlags maps gen.HeteroConfig fields to the flags that set them.
var heteroGenFlags = map[string]string{
	"Papers": "--nodes, --scale", "Pairs": "--classes", "PaperDim": "--features", "OtherDim": "--features",
	"Degree": "--nodes", "Noise": "--noise", "TrainFrac": "--train-frac", "ValFrac": "--val-frac",
	"TestFrac": "--test-frac, --train-frac, --val-frac",
}

// runHetero is 'strata import' of a typed layout.
func (c *importCmd) runHetero(e *env, kind importer.Kind) error {
	refused := []struct {
		set  bool
		flag string
	}{{c.Symmetrize, "symmetrize (use --add-reverse)"}, {c.Split != 0, "split"}, {c.RemapIDs, "remap-ids"}, {c.NumNodes != 0, "num-nodes"}}
	for _, r := range refused {
		if r.set {
			return usageError{fmt.Errorf("--%s does not apply to the typed layout %s", r.flag, kind)}
		}
	}
	start := time.Now()
	opts := importer.Options{Name: c.Name, OGBSplit: c.OGBSplit, Quiet: e.quiet, Overwrite: c.Overwrite}
	h, err := importer.LoadHetero(kind, c.Src, opts)
	if err != nil {
		return err
	}
	if c.AddReverse {
		if h, err = h.AddReverse(); err != nil {
			return err
		}
	}
	if err := dataset.WriteHetero(c.Dst, h, dataset.WriteOptions{Overwrite: c.Overwrite, Quiet: e.quiet}); err != nil {
		return err
	}
	s, err := dataset.HeteroInfo(c.Dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "imported %s (%s layout) into %s in %.1fs\n", c.Src, kind, c.Dst, time.Since(start).Seconds())
	fmt.Fprint(e.stdout, s.String())
	return nil
}

// infoHetero is 'strata info DIR' of a typed dataset directory.
func (c *infoCmd) infoHetero(e *env) error {
	if !c.Fast {
		h, err := dataset.OpenHetero(c.Dataset, dataset.OpenOptions{Quiet: e.quiet})
		if err != nil {
			return err
		}
		if err := h.Close(); err != nil {
			return err
		}
	}
	s, err := dataset.HeteroInfo(c.Dataset)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, s.String())
	if c.Fast {
		fmt.Fprintln(e.stdout, "verified    no (--fast: manifest and file sizes only)")
	} else {
		fmt.Fprintln(e.stdout, "verified    checksums, structure, ID ranges, finite values")
	}
	return nil
}
