package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commcli"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// fullGraphFlags are the flags of 'strata train --mode fullgraph'
// (package fullgraph: full-graph training on one or more devices with
// Sancus's bounded-staleness skip-broadcast). They are embedded in
// trainCmd.
type fullGraphFlags struct {
	Devices    string   `help:"fullgraph mode, and sampled mode on several devices (DSP, see --scheme): the devices, one rank each, with one syntax for both modes: ${devices} (default: --device). With --model rgcn or hsage: typed training, data parallel over the devices." placeholder:"LIST"`
	Staleness  bool     `help:"fullgraph mode: reuse cached embedding blocks and skip broadcasts within the staleness bounds (Sancus)."`
	StaleEp    *int     `name:"staleness-epochs" help:"fullgraph mode: epoch bound, the most epochs a cached block may age (default 3)." placeholder:"N"`
	StaleEps   *float64 `name:"staleness-eps" help:"fullgraph mode: variation bound, the largest relative change of a block since its cached copy that still skips (default 0.5)." placeholder:"EPS"`
	StaleAdapt bool     `name:"staleness-adaptive" help:"fullgraph mode: scale the variation bound by the training loss relative to the first epoch's."`
	StaleGrad  bool     `name:"staleness-gradients" help:"fullgraph mode: apply the bounds to gradient messages too."`
	StaleDrift string   `name:"staleness-drift" enum:"embedding,params" default:"embedding" help:"fullgraph mode: what the variation bound measures: embedding (the block's change) or params (the change of the parameters that produced it; no dropout noise floor)."`
	Exchange   string   `help:"fullgraph mode: which rows of the embedding blocks travel: blocks (every row to every device) or halo (each device only the rows it reads; the last layer in training only the rows the training nodes read; exact, fewer bytes)." enum:"blocks,halo" default:"blocks"`
	Partition  string   `help:"fullgraph mode and sampled mode with --devices: how nodes are split into the devices' blocks or patches: multilevel, metis (libmetis) or range (ID ranges)." enum:"multilevel,metis,range" default:"multilevel"`
	Masks      string   `help:"fullgraph mode: dropout masks on several devices: global (identical to one device), local (drawn per device, no host work) or auto (global on CPU devices, local on GPUs)." enum:"auto,global,local" default:"auto"`
	EvalEvery  int      `name:"eval-every" help:"Evaluate every N epochs and after the last (every mode)." default:"1" placeholder:"N"`
	NodeOrder  string   `name:"node-order" help:"fullgraph mode: node order within the devices' blocks: degree (descending in-degree: the most gathered rows stay in the GPU's cache), none, or auto (degree on GPUs, none on CPU devices)." enum:"auto,none,degree" default:"auto"`
	Comm       string   `help:"several devices: how their collectives move data. Sampled mode with --devices (DSP: the gradient all-reduce and the feature and sampling exchanges): nccl (CUDA devices), gpushm (GPU shared-memory all-reduce; its host pipeline on CPU devices), shm or tcp (host collectives; GPU buffers staged through host memory) or auto (NCCL on CUDA devices, in-process on CPU devices). --mode fullgraph (embedding blocks, gradient contributions and weight gradients between GPUs): nccl, gpushm, host (staged through host memory) or auto (NCCL when it loads, else gpushm; host for CPU devices)." enum:"auto,nccl,gpushm,shm,tcp,host" default:"auto"`
	PartFile   string   `name:"partition-file" help:"fullgraph mode: use the partition in this file (partition.bin written by 'strata partition' for the same dataset, with as many parts as devices) instead of partitioning." placeholder:"FILE" type:"existingfile"`

	GPUShm commcli.GPUShmFlags `embed:""` // --comm gpushm (or auto in fullgraph mode)
}

// fullGraphMode is --mode fullgraph: whole-graph training on one or more
// devices (--mode full is the same engine on the one device of --device).
const fullGraphMode = "fullgraph"

// fullGraphConfig is the configuration of whole-graph training: the
// common settings and the fullgraph flags. full is --mode full (one
// device), which accepts the sampling flags as it always has (--fanouts
// is --eval-fanouts' default; Run checks them with config); --mode
// fullgraph refuses them.
func (c *trainCmd) fullGraphConfig(full bool) (fullgraph.Config, error) {
	cfg := fullgraph.Defaults(c.Model)
	f := &c.FullGraph
	refuse := func(flag string) error {
		return usageError{fmt.Errorf("--%s does not apply to --mode fullgraph", flag)}
	}
	switch {
	case full:
	case c.BatchSize != nil:
		return cfg, refuse("batch-size")
	case c.Fanouts != nil:
		return cfg, refuse("fanouts")
	}
	if set := c.DSP.set(); len(set) > 0 {
		return cfg, refuse(set[0])
	}
	switch f.Comm {
	case comm.KindShm, comm.KindTCP:
		return cfg, usageError{fmt.Errorf("--comm %s applies to sampled mode with --devices; --mode fullgraph takes auto, nccl, gpushm or host", f.Comm)}
	}
	if set := f.GPUShm.Set(); len(set) > 0 && (f.Comm == fullgraph.CommNCCL || f.Comm == fullgraph.CommHost) {
		return cfg, usageError{fmt.Errorf("--%s applies to --comm gpushm (or auto), not --comm %s", set[0], f.Comm)}
	}
	com, err := c.common()
	if err != nil {
		return cfg, err
	}
	cfg.Common = com
	cfg.Partition = f.Partition
	if f.Masks != "auto" {
		cfg.Masks = f.Masks
	}
	if f.Exchange != fullgraph.ExchangeBlocks {
		cfg.Exchange = f.Exchange
	}
	if f.Staleness {
		cfg.Staleness = fullgraph.DefaultStaleness()
		setInt(&cfg.Staleness.EpochBound, f.StaleEp)
		setFloat(&cfg.Staleness.Epsilon, f.StaleEps)
		cfg.Staleness.Adaptive, cfg.Staleness.Gradients = f.StaleAdapt, f.StaleGrad
		if f.StaleDrift == fullgraph.DriftParams {
			cfg.Staleness.Drift = fullgraph.DriftParams
		}
	} else if f.StaleEp != nil || f.StaleEps != nil || f.StaleAdapt || f.StaleGrad || f.StaleDrift != "embedding" {
		return cfg, usageError{fmt.Errorf("--staleness-* flags need --staleness")}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, configFlag(err)
	}
	if c.Checkpoint != "" && cfg.Staleness.Enabled {
		return cfg, usageError{fmt.Errorf("--checkpoint with --staleness: the historical embeddings each device keeps are not saved")}
	}
	return cfg, nil
}

// setInt and setFloat set *dst to a flag's value when it was given.
func setInt(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}

func setFloat(dst *float64, v *float64) {
	if v != nil {
		*dst = *v
	}
}

// set names the flags of fullGraphFlags that only --mode fullgraph reads,
// given values other than their defaults (--comm and --gpushm-* are
// commSet's).
func (f *fullGraphFlags) set() []string {
	var out []string
	add := func(on bool, name string) {
		if on {
			out = append(out, name)
		}
	}
	add(f.Staleness, "staleness")
	add(f.StaleEp != nil, "staleness-epochs")
	add(f.StaleEps != nil, "staleness-eps")
	add(f.StaleAdapt, "staleness-adaptive")
	add(f.StaleGrad, "staleness-gradients")
	add(f.StaleDrift != "embedding", "staleness-drift")
	add(f.Masks != "auto", "masks")
	add(f.Exchange != fullgraph.ExchangeBlocks, "exchange")
	add(f.NodeOrder != "auto", "node-order")
	add(f.PartFile != "", "partition-file")
	return out
}

// commSet names --comm and the --gpushm-* flags when given: they apply
// to several devices (--devices, or --mode fullgraph).
func (f *fullGraphFlags) commSet() []string {
	var out []string
	if f.Comm != "auto" {
		out = append(out, "comm")
	}
	return append(out, f.GPUShm.Set()...)
}

// openDevices opens --devices (parseDevices), one rank each, the virtual
// devices of cpu:N sharing one CPU back end; empty means the single
// device of --device.
func openDevices(list, device string, note io.Writer) ([]backend.Backend, error) {
	if strings.TrimSpace(list) == "" {
		b, err := openDeviceNote(device, note)
		if err != nil {
			return nil, err
		}
		return []backend.Backend{b}, nil
	}
	set, err := parseDevices(list)
	if err != nil {
		return nil, err
	}
	if !set.Virtual && len(set.Specs) > 1 {
		multiGPUEnv()
	}
	return set.open(true)
}

// multiGPUEnv sets, unless the user did, what several GPUs' concurrent
// NCCL communicators need before CUDA starts: kernels loaded when a
// module loads, not at a first launch that could wait behind another
// stage's collective in flight (CUDA_MODULE_LOADING=EAGER).
func multiGPUEnv() {
	if _, ok := os.LookupEnv("CUDA_MODULE_LOADING"); !ok {
		os.Setenv("CUDA_MODULE_LOADING", "EAGER")
	}
}

// runFullGraph is 'strata train --mode fullgraph', and with full 'strata
// train --mode full': the same engine on the one device of --device, in
// the dataset's node order. Under a launcher the devices are this
// process's share of a job (joinJob).
func (c *trainCmd) runFullGraph(e *env, full bool) (err error) {
	cfg, err := c.fullGraphConfig(full)
	if err != nil {
		return err
	}
	if err := c.checkCheckpointFlags(); err != nil {
		return err
	}
	if err := c.checkOutputs(); err != nil {
		return err
	}
	keep, err := c.checkSave()
	if err != nil {
		return err
	}
	gso, _, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{}) // the flags, then STRATA_GPUSHM_*
	if err != nil {
		return usageError{err}
	}
	var log io.Writer = e.stderr
	if e.quiet {
		log = nil
	}
	bs, err := openDevices(c.FullGraph.Devices, c.Device, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kind, _, _ := backend.ParseDevice(deviceSpecOf(bs[0]))
	w, err := c.joinJob(ctx, e, deviceSet{Kind: kind, Specs: make([]string, len(bs))})
	if err != nil {
		return err
	}
	ranks := len(bs)
	if w != nil {
		ranks = w.Size()
		defer func() { w.Leave(err) }() // tells the others why this one failed
		if e.quiet {
			log = nil
		}
	}
	commTimeout, err := c.commTimeout()
	if err != nil {
		return err
	}
	gpu := false
	for _, b := range bs {
		gpu = gpu || b.Name() != "cpu"
	}
	if c.FullGraph.Masks == "auto" {
		cfg.Masks = fullgraph.MasksGlobal
		if gpu {
			cfg.Masks = fullgraph.MasksLocal
		}
	}
	switch c.FullGraph.NodeOrder {
	case "auto":
		if gpu && !full {
			cfg.Order = fullgraph.OrderDegree
		}
	default:
		cfg.Order = c.FullGraph.NodeOrder
	}
	ds, closeDS, err := openDataset(c.Dataset, e.quiet)
	if err != nil {
		return err
	}
	defer closeDS()
	if err := agreeDataset(ctx, w, ds); err != nil {
		return err
	}
	if err := checkMemory(fullgraph.EstimateMemory(cfg, len(bs), shapeOf(ds), onHost(bs)), c.FullGraph.Devices, log); err != nil {
		return err
	}
	if log != nil {
		fmt.Fprintf(log, "training %s on %s (%d nodes, %d edges, %d features, %d classes) on %d device(s): %s\n",
			cfg.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, ds.NumClasses, ranks, bs[0].Name())
		fmt.Fprintf(log, "config: %s\n", cfg.String())
	}
	start := time.Now()
	opts := fullgraph.Options{Backends: bs, Log: log, CheckpointDir: c.Checkpoint, CheckpointEvery: c.CheckpointEvery, Resume: c.Resume, Keep: keep,
		World: w, CommTimeout: commTimeout}
	orig := ds // the dataset the user gave, before a partition file renumbers it
	if f := c.FullGraph.PartFile; f != "" {
		if ds, opts.Offsets, err = fullgraph.ApplyPartitionFile(ds, f); err != nil {
			return err
		}
		if len(opts.Offsets) != ranks+1 {
			return usageError{fmt.Errorf("--partition-file %s has %d parts for %d devices", f, len(opts.Offsets)-1, ranks)}
		}
	}
	dcs, kind, why, err := c.fullGraphComms(ctx, w, bs, gso, commTimeout)
	var ce *fullgraph.ConfigError
	if errors.As(err, &ce) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	defer func() {
		for _, dc := range dcs {
			dc.Close()
		}
	}()
	opts.DeviceComms = dcs
	if log != nil && ranks > 1 {
		fmt.Fprintf(log, "communication: %s (%s)\n", kind, why)
	}
	rep, err := fullgraph.Run(ctx, ds, cfg, opts)
	if errors.Is(err, fullgraph.ErrInterrupted) && c.Checkpoint != "" {
		return fmt.Errorf("%w\nthe last checkpoint is in %s: run the same command with --resume to continue", err, c.Checkpoint)
	}
	if errors.As(err, &ce) {
		return configFlag(err)
	}
	if err != nil {
		return err
	}
	if w != nil && w.Process() != 0 {
		jobSummary(e, w, fmt.Sprintf("trained %d epochs", cfg.Epochs))
		return nil
	}
	printAccuracy(e, &rep.Report)
	if ranks > 1 {
		fmt.Fprintf(e.stdout, "broadcasts          %d of %d skipped, %.1f%% of broadcast bytes avoided\n",
			rep.Comm.BroadcastsSkipped, rep.Comm.Broadcasts, 100*rep.Comm.AvoidedFraction)
	}
	on := bs[0].Name()
	if ranks > 1 {
		on = fmt.Sprintf("%d device(s)", ranks)
	}
	if w != nil {
		on += fmt.Sprintf(" in %d processes on %d machine(s)", rep.World.Processes, rep.World.Machines)
	}
	fmt.Fprintf(e.stdout, "time                %.1fs on %s (%.4fs per training epoch)\n", time.Since(start).Seconds(), on, rep.EpochSeconds)
	mode := fullGraphMode
	if full {
		mode = train.Full
	}
	if err := c.saveModel(e, keep, orig, cfg.Common, mode, rep.Config, rep.RowNormalized, storageOf(orig.Features)); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, &rep.Report)
}

// fullGraphComms opens the device communicators of --comm for bs: in one
// process fullgraph.OpenDeviceComms; in a job of several processes NCCL
// across them when the devices are GPUs (auto or nccl), else none (the
// blocks go through the job's host communicators: host).
func (c *trainCmd) fullGraphComms(ctx context.Context, w *world.World, bs []backend.Backend, gso gpushm.Options, timeout time.Duration) ([]comm.Comm, string, string, error) {
	kind := c.FullGraph.Comm
	if w == nil {
		return fullgraph.OpenDeviceComms(ctx, kind, bs, fullgraph.CommOptions{GPUShm: gso, Timeout: timeout})
	}
	gpus := true
	for _, b := range bs {
		gpus = gpus && onDevice(b)
	}
	switch {
	case kind == fullgraph.CommHost || kind == fullgraph.CommAuto && !gpus:
		return nil, fullgraph.CommHost, "staged through the job's " + w.Info().Comm + " communicators", nil
	case kind == fullgraph.CommGPUShm:
		return nil, "", "", usageError{fmt.Errorf("--comm gpushm works within one process; a job of several processes uses nccl or host")}
	case kind != fullgraph.CommAuto && kind != fullgraph.CommNCCL:
		return nil, "", "", usageError{fmt.Errorf("--comm %s: want auto, nccl or host in a job of several processes", kind)}
	case !gpus:
		return nil, "", "", usageError{fmt.Errorf("--comm nccl needs CUDA devices")}
	}
	dcs, k, err := w.DeviceGroup(ctx, "fullgraph-dev", bs, world.DeviceOptions{Options: comm.Options{Timeout: timeout}, Kind: comm.KindNCCL, Prefix: "fullgraph"})
	return dcs, k, "NCCL across the job's processes", err
}
