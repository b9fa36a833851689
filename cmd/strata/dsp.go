package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/model"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// dspFlags are the flags of sampled training on several devices ('strata
// train --devices cpu:4', package dsp/engine: DSP's collective sampling,
// partitioned feature cache and pipeline, on CPU virtual devices and GPUs
// alike). They are embedded in trainCmd;
// --devices and --partition are shared with --mode fullgraph. Given
// without --devices they run the DSP engine on the one device of --device
// (dspOnOneDevice).
type dspFlags struct {
	Scheme        string `help:"sampled mode with --devices (this and the flags below it without --devices run the DSP engine on the one device of --device, as --devices cpu:1 on the CPU): collective sampling scheme, node (per-node fanouts) or layer (fanouts are edges per layer)." enum:"node,layer" default:"node"`
	Replace       bool   `help:"sampled mode with --devices (or one device): sample with replacement."`
	Weighted      bool   `help:"sampled mode with --devices (or one device): sample proportionally to edge weights."`
	Cache         string `help:"sampled mode with --devices: feature cache per device, in bytes (e.g. 512MiB), 'all' or 0." default:"all" placeholder:"BYTES"`
	CachePolicy   string `help:"sampled mode with --devices: partition (each device caches hot nodes of its own patch), replicate (each --cache-group of devices holds one copy) or auto (replicate over the fewest devices whose --cache budgets hold every row, else partition)." enum:"auto,partition,replicate" default:"auto"`
	CacheGroup    int    `help:"sampled mode with --devices: devices sharing one cache copy under --cache-policy replicate." default:"1" placeholder:"N"`
	Hotness       string `help:"sampled mode with --devices: which nodes are hot: in-degree, pagerank, reverse-pagerank or presample (counted by a pre-sampling pass)." enum:"in-degree,pagerank,reverse-pagerank,presample" default:"in-degree"`
	TopologyCache string `help:"sampled mode with --devices: topology bytes per device kept in device memory (the rest in host memory), or 'all'." default:"all" placeholder:"BYTES"`
	QueueCapacity int    `help:"sampled mode with --devices: batches queued between the sampler, loader and trainer of each device." default:"2" placeholder:"N"`
	Rebalance     string `help:"sampled mode with --devices: equal batches per device by pad (use every training node) or trim (DSP: full batches only)." enum:"pad,trim" default:"pad"`
	NoCoordinator bool   `help:"sampled mode with --devices: let the stages launch collectives without the launch-order coordinator."`
	// Engine is refused (Validate): the host engine is gone.
	Engine          string `hidden:"" help:"removed: --devices always runs the one DSP engine."`
	NoPipeline      bool   `help:"sampled mode with --devices: run each device's sampler, loader and trainer one after another (the pipeline off, for comparison)."`
	SharedStream    bool   `help:"sampled mode with CUDA --devices: run each GPU's sampler on the trainer's stream instead of its own."`
	SyncCollectives bool   `help:"sampled mode with --devices: NCCL collectives wait for their completion instead of returning once queued (for comparison; nothing changes on the CPU)."`
	NoStagePriority bool   `help:"sampled mode with --devices: the samplers' and loaders' GPU streams get the default priority instead of the highest (for comparison; nothing changes on the CPU)."`
	StallTimeout    string `help:"sampled mode with --devices: fail (naming every stage's state) when a stage waits longer than this for a queue, its turn or a collective, e.g. 60s (default 10m)." placeholder:"DURATION"`
	GPUSampler      string `name:"gpu-sampler" help:"sampled mode with CUDA --devices: csp (collective sampling over each device's patch) or full (every GPU samples the whole graph)." enum:"csp,full" default:"csp"`
	MachineDir      string `help:"sampled mode in a job (CPU or GPU --devices): this machine's directory, written by 'strata partition --machines' (replaces --dataset): the machine loads only its own rows and asks the other machines for theirs over gRPC." placeholder:"DIR"`
	RemoteCache     string `help:"with --machine-dir: bytes of other machines' feature rows each process keeps once fetched (e.g. 64MiB), 0 for none; auto: 256MiB." default:"auto" placeholder:"BYTES"`
	ProfileOps      int    `help:"sampled mode with CUDA --devices: time every op of each device's trainer during epoch N (1-based) and print each op's device time and launches per step (that epoch runs slower; 0: off)." default:"0" placeholder:"N"`
	SamplerWorkers  int    `help:"sampled mode with --devices: samplers per device, each on its own stream with its own communicators, taking turns at the batches (one samples while another waits for its peers)." default:"1" placeholder:"N"`
}

// parseBytes reads a byte count such as 0, 4096, 64MiB, 1.5GB or "all"
// (returned as -1).
func parseBytes(flag, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") {
		return -1, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	// !(v >= 0) also refuses NaN, which every comparison lets through.
	if err != nil || !(v >= 0) || v*mult > 1<<50 {
		return 0, usageError{fmt.Errorf("--%s %q: want a byte count such as 0, 65536, 512MiB or 2GB, or all", flag, s)}
	}
	return int64(v * mult), nil
}

// dspConfig builds the engine's configuration from the flags.
func (c *trainCmd) dspConfig(devices int) (engine.Config, error) {
	tc, err := c.config()
	if err != nil {
		return engine.Config{}, err
	}
	return c.dspConfigOf(tc, devices)
}

// dspConfigOf is the engine's configuration of the DSP flags for tc
// (node classification's, or link prediction's encoder and batches).
func (c *trainCmd) dspConfigOf(tc train.Config, devices int) (engine.Config, error) {
	var err error
	if tc.Mode != train.Sampled {
		return engine.Config{}, usageError{fmt.Errorf("--devices with --mode %s: several devices train sampled mini-batches (or use --mode fullgraph)", tc.Mode)}
	}
	if c.CheckpointEvery != 0 {
		return engine.Config{}, usageError{fmt.Errorf("--checkpoint-every with --devices: multi-device runs write a checkpoint after every epoch")}
	}
	f := &c.DSP
	cfg := engine.Config{Train: tc, Devices: devices, Scheme: f.Scheme, Replace: f.Replace, Weighted: f.Weighted,
		Partition: c.FullGraph.Partition, CachePolicy: cache.Policy(f.CachePolicy), Hotness: cache.Hotness(f.Hotness),
		QueueCapacity: f.QueueCapacity, Rebalance: f.Rebalance, NoCoordinator: f.NoCoordinator,
		NoPipeline: f.NoPipeline, Sampler: f.GPUSampler, SharedStream: f.SharedStream,
		SyncCollectives: f.SyncCollectives, NoStagePriority: f.NoStagePriority,
		SamplerWorkers: f.SamplerWorkers, Comm: c.FullGraph.Comm, ProfileEpoch: f.ProfileOps}
	if f.ProfileOps < 0 || f.ProfileOps > tc.Epochs {
		return cfg, usageError{fmt.Errorf("--profile-ops %d: want an epoch in 1..%d (--epochs), or 0 for off", f.ProfileOps, tc.Epochs)}
	}
	if cfg.Comm == fullgraph.CommHost {
		return cfg, usageError{fmt.Errorf("--comm host applies to --mode fullgraph; sampled --devices take %s", strings.Join(engine.CommKinds, ", "))}
	}
	if set := c.FullGraph.GPUShm.Set(); len(set) > 0 && cfg.Comm != comm.KindGPUShm {
		return cfg, usageError{fmt.Errorf("--%s applies to --comm gpushm, not --comm %s", set[0], cfg.Comm)}
	}
	if f.QueueCapacity < 1 || f.QueueCapacity > 1024 {
		return cfg, usageError{fmt.Errorf("--queue-capacity %d: want 1..1024", f.QueueCapacity)}
	}
	if ev := c.FullGraph.EvalEvery; ev < 1 || ev > 1<<20 {
		return cfg, usageError{fmt.Errorf("--eval-every %d: want 1..%d", ev, 1<<20)}
	}
	switch {
	case cfg.CachePolicy != cache.Replicate && f.CacheGroup != 1:
		return cfg, usageError{fmt.Errorf("--cache-group %d needs --cache-policy replicate", f.CacheGroup)}
	case f.CacheGroup < 1 || f.CacheGroup > devices || devices%f.CacheGroup != 0:
		return cfg, usageError{fmt.Errorf("--cache-group %d does not divide the %d devices", f.CacheGroup, devices)}
	case cfg.CachePolicy == cache.Replicate:
		cfg.CacheGroup = f.CacheGroup
	}
	if cfg.CacheBytes, err = parseBytes("cache", f.Cache); err != nil {
		return cfg, err
	}
	if cfg.TopologyBytes, err = parseBytes("topology-cache", f.TopologyCache); err != nil {
		return cfg, err
	}
	if cfg.TopologyBytes == 0 {
		cfg.TopologyBytes = 1 // 0 means no limit to the engine; here it means none on the device
	}
	if f.StallTimeout != "" {
		d, err := time.ParseDuration(f.StallTimeout)
		if err != nil || d <= 0 {
			return cfg, usageError{fmt.Errorf("--stall-timeout %q: want a positive duration such as 60s", f.StallTimeout)}
		}
		cfg.WaitTimeout, cfg.CommTimeout = d, d
	}
	if c.World.CommTimeout != "" {
		if cfg.CommTimeout, err = c.commTimeout(); err != nil {
			return cfg, err
		}
	}
	// The engine's own checks, on a copy (Normalize fills defaults), so
	// that a bad combination is a usage error before any device opens.
	chk := cfg
	if err := chk.Normalize(); err != nil {
		return cfg, configFlag(err)
	}
	return cfg, nil
}

// dspOnOneDevice sets --devices to the single device of --device for the
// DSP flag flag given without --devices, after checking the mode is
// sampled (the DSP engine trains sampled mini-batches).
func (c *trainCmd) dspOnOneDevice(flag string) error {
	mode := c.Mode
	if mode == "" {
		mode = train.Defaults(c.Model).Mode
	}
	if mode != train.Sampled {
		return usageError{fmt.Errorf("--%s applies to sampled mode (--mode sampled, the default of --model sage), not --mode %s", flag, mode)}
	}
	list, err := singleDeviceList(c.Device)
	if err != nil {
		return err
	}
	c.FullGraph.Devices = list
	return nil
}

// dspFlagsSet names the flags of dspFlags given values other than their
// defaults: they mean something only in sampled mode with --devices.
func (f *dspFlags) set() []string {
	var out []string
	add := func(on bool, name string) {
		if on {
			out = append(out, name)
		}
	}
	add(f.Scheme != "node", "scheme")
	add(f.Replace, "replace")
	add(f.Weighted, "weighted")
	add(f.Cache != "all", "cache")
	add(f.CachePolicy != "auto", "cache-policy")
	add(f.CacheGroup != 1, "cache-group")
	add(f.Hotness != "in-degree", "hotness")
	add(f.TopologyCache != "all", "topology-cache")
	add(f.QueueCapacity != 2, "queue-capacity")
	add(f.Rebalance != "pad", "rebalance")
	add(f.NoCoordinator, "no-coordinator")
	add(f.NoPipeline, "no-pipeline")
	add(f.SharedStream, "shared-stream")
	add(f.SyncCollectives, "sync-collectives")
	add(f.NoStagePriority, "no-stage-priority")
	add(f.StallTimeout != "", "stall-timeout")
	add(f.GPUSampler != "csp", "gpu-sampler")
	add(f.SamplerWorkers != 1, "sampler-workers")
	add(f.ProfileOps != 0, "profile-ops")
	add(f.MachineDir != "", "machine-dir")
	add(f.RemoteCache != "auto", "remote-cache")
	return out
}

// checkCUDAFlags refuses the flags that only CUDA devices read on other
// devices.
func (c *trainCmd) checkCUDAFlags(bs []backend.Backend) error {
	f := &c.DSP
	for _, b := range bs {
		if onDevice(b) {
			continue
		}
		switch {
		case f.SharedStream:
			return usageError{fmt.Errorf("--shared-stream needs CUDA --devices")}
		case f.ProfileOps != 0:
			return usageError{fmt.Errorf("--profile-ops needs CUDA --devices (%s has no op profiler)", b.Name())}
		case f.GPUSampler != engine.SamplerCSP:
			return usageError{fmt.Errorf("--gpu-sampler %s needs CUDA --devices", f.GPUSampler)}
		case c.FullGraph.Comm == comm.KindNCCL:
			return usageError{fmt.Errorf("--comm nccl needs CUDA --devices, not %s (use auto, gpushm, shm or tcp)", b.Name())}
		}
	}
	return nil
}

// runDSP is 'strata train --devices LIST' in sampled mode: the devices
// are this process's share of a job when it is one of several processes
// (joinJob).
func (c *trainCmd) runDSP(e *env) (err error) {
	// The setup's phases before the engine's (engine.SetupPhase).
	var phases []engine.SetupPhase
	phase := func(name string, d time.Duration) {
		phases = append(phases, engine.SetupPhase{Phase: name, Device: -1, Seconds: d.Seconds()})
	}
	set, err := parseDevices(c.FullGraph.Devices)
	if err != nil {
		return err
	}
	t0 := time.Now()
	bs, err := set.open(false)
	if err != nil {
		return err
	}
	phase("devices", time.Since(t0))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := c.joinJob(ctx, e, set)
	if err != nil {
		return err
	}
	ranks := len(bs)
	if w != nil {
		ranks = w.Size()
		defer func() { w.Leave(err) }() // tells the others why this one failed
	}
	cfg, err := c.dspConfig(ranks)
	if err != nil {
		return err
	}
	if err := c.checkCUDAFlags(bs); err != nil {
		return err
	}
	if err := c.checkOutputs(); err != nil {
		return err
	}
	gso, _, err := c.FullGraph.GPUShm.EnvOptions(gpushm.Options{}) // the flags, then STRATA_GPUSHM_*
	if err != nil {
		return usageError{err}
	}
	keep, err := c.checkSave()
	if err != nil {
		return err
	}
	mdir, remoteCache, err := c.openMachineDir(phase)
	if err != nil {
		return err
	}
	var ds *dataset.Dataset
	closeDS := func() {}
	if mdir != nil {
		ds, closeDS = mdir.Dataset, func() { mdir.Close() }
	} else if ds, closeDS, err = openDatasetTimed(c.Dataset, e.quiet, phase); err != nil {
		return err
	}
	defer closeDS()
	if err := agreeDataset(ctx, w, ds); err != nil {
		return err
	}
	var log io.Writer = e.stderr
	if e.quiet {
		log = nil
	}
	local := cfg
	local.Devices = len(bs) // what this process holds
	sh := shapeOf(ds)
	if cfg.Train.RowNorm == train.RowNormAuto {
		// Quick on signed features (it stops at the first negative
		// value): then no normalized copy is made.
		sh.Signed = !train.NonNegative(ds.Features)
	}
	if err := checkMemory(engine.EstimateMemory(local, sh, onHost(bs)), c.FullGraph.Devices, log); err != nil {
		return err
	}
	if log != nil {
		fmt.Fprintf(log, "training %s on %s (%d nodes, %d edges, %d features, %d classes) on %d devices (%s), DSP %s-wise sampling\n",
			cfg.Train.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, ds.NumClasses, ranks, bs[0].Name(), cfg.Scheme)
		fmt.Fprintf(log, "config: %s\n", cfg.Train.String())
		fmt.Fprintf(log, "pipeline %v, evaluation every %d epoch(s) and after the last\n", !cfg.NoPipeline, cfg.Train.EvalEvery)
	}
	start := time.Now()
	rep, err := engine.Run(ctx, ds, cfg, engine.Options{Backends: bs, Log: log, CheckpointDir: c.Checkpoint, Resume: c.Resume, GPUShm: gso, Keep: keep, World: w,
		Machine: mdir, RemoteCacheBytes: remoteCache, RemoteTimeout: cfg.CommTimeout,
		Start: processStart, Phases: phases})
	if errors.Is(err, train.ErrInterrupted) && c.Checkpoint != "" && log != nil {
		fmt.Fprintf(log, "interrupted: the last completed epoch is saved in %s; continue with --resume\n", c.Checkpoint)
	}
	if ce := (*engine.ConfigError)(nil); errors.As(err, &ce) && ce.Field == "comm" {
		return configFlag(err) // a kind that cannot span the job's processes
	}
	if err != nil {
		return err
	}
	if w != nil && w.Process() != 0 {
		jobSummary(e, w, fmt.Sprintf("trained %d epochs", cfg.Train.Epochs))
		return nil
	}
	sel := "best validation"
	if rep.Selection == train.SelectLast {
		sel = "last"
	}
	fmt.Fprintf(e.stdout, "validation accuracy %.4f\ntest accuracy       %.4f  (epoch %d of %d, %s; last epoch: val %.4f, test %.4f)\n",
		rep.ValAccuracy, rep.TestAccuracy, rep.SelectedEpoch, cfg.Train.Epochs, sel, rep.LastValAcc, rep.LastTestAcc)
	fmt.Fprintf(e.stdout, "pipeline (total)    %s\n", rep.Metrics.Summary)
	fmt.Fprintf(e.stdout, "epoch time          %.3fs (training only, mean of epochs after the first; pipeline %v)\n", rep.Run.SteadyEpochSeconds, rep.Run.Pipeline)
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", time.Since(start).Seconds(), rep.Device)
	if w != nil {
		fmt.Fprintf(e.stdout, "job                 %d ranks over %d processes on %d machine(s) (%s)\n", rep.World.Ranks, rep.World.Processes, rep.World.Machines, rep.World.Comm)
	}
	// The engine's devices evaluate dense feature rows (engine.Run keeps
	// them dense on every device).
	if err := c.saveModel(e, keep, ds, cfg.Train.Common, cfg.Train.Mode, rep.Report.Config, rep.RowNormalized, model.Dense); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, &rep.Report)
}
