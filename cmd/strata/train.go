package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// trainCmd is 'strata train'. Flags left unset take the chosen model's
// defaults (train.Defaults): pointers tell "unset" from zero.
type trainCmd struct {
	Dataset string `help:"Built-in dataset name (${builtins}), a Strata dataset directory, or a directory 'strata import' understands (default cora)." default:"cora" placeholder:"NAME|DIR"`
	Model   string `help:"Model: gcn, sage (GraphSAGE-mean) or gat; rgcn (R-GCN) or hsage (heterogeneous GraphSAGE) for typed datasets (docs/training.md)." enum:"gcn,sage,gat,rgcn,hsage" default:"sage"`
	Mode    string `help:"Training mode: sampled (mini-batches of sampled neighborhoods), full (whole graph on one device) or fullgraph (whole graph on one or more devices, see --devices; full is fullgraph on --device). Default: sampled for sage, full for gcn and gat." default:""`

	Layers    *int     `help:"Message-passing layers (default 2)."`
	Hidden    *int     `help:"Hidden width, per head for gat (default: gcn 16, sage 64, gat 8)."`
	Heads     *int     `help:"gat: attention heads of hidden layers (default 8)."`
	OutHeads  *int     `help:"gat: heads of the output layer, averaged (default 1)."`
	Dropout   *float64 `help:"Dropout on layer inputs (default: gcn/sage 0.5, gat 0.6)."`
	AttnDrop  *float64 `name:"attn-dropout" help:"gat: dropout on attention coefficients (default 0.6)."`
	RowNorm   *string  `help:"Divide every feature row by its sum: auto (when all features are >= 0, e.g. bag-of-words), on or off (default auto; off for --task link with gcn or gat)." enum:"auto,on,off" placeholder:"auto|on|off"`
	Optimizer string   `help:"Optimizer: adam or sgd." enum:"adam,sgd" default:"adam"`
	LR        *float64 `name:"lr" help:"Learning rate (default: gcn/sage 0.01, gat 0.005)."`
	WeightDec *float64 `name:"weight-decay" help:"L2 weight decay added to the gradient (default 5e-4)."`
	Momentum  float64  `help:"sgd: momentum." default:"0"`
	Epochs    *int     `help:"Epochs (default: gcn and gat 200, sage 30)."`
	BatchSize *int     `help:"Sampled mode: seed nodes per batch (default 32)."`
	Fanouts   []int    `help:"Sampled mode: neighbors sampled per node at each hop, the seeds' hop first; -1 takes all (default 10,10)." sep:","`
	Eval      string   `help:"Evaluation: full (all neighbors, whole graph in one pass) or sampled (mini-batches with --eval-fanouts)." enum:"full,sampled" default:"full"`
	EvalFan   []int    `name:"eval-fanouts" help:"Sampled evaluation: fanouts per hop (default: the training fanouts)." sep:","`
	EvalBatch int      `name:"eval-batch-size" help:"Sampled evaluation: seeds per batch." default:"1024"`
	Select    string   `help:"Which epoch's accuracies are the headline: best (highest validation accuracy) or last." enum:"best,last" default:"best"`
	Seed      uint64   `help:"Seed of every random choice (weights, batch order, sampling, dropout)." default:"1"`

	Device          string `help:"Compute device: auto (a registered accelerator that opens, else cpu), cpu, cuda, cuda:N." default:"auto"`
	Precision       string `help:"Arithmetic: fp32 (full float32), tf32 (matrix products on TF32 tensor cores, about 1e-3 relative error) or bf16 (products on bfloat16 tensor cores, input features and, for sampled SAGE and GCN, activations and their gradients stored as bfloat16, about 1e-2; float32 weights and optimizer). On the CPU tf32 and bf16 are emulated, with the same numerics." enum:"fp32,tf32,bf16" default:"fp32"`
	TF32            bool   `name:"tf32" hidden:"" help:"Deprecated: --precision tf32."`
	Report          string `help:"Write a JSON report (accuracies, per-epoch losses, config) to FILE." placeholder:"FILE" type:"path"`
	Plot            string `help:"Draw loss and accuracy curves to FILE (.png, .svg or .pdf)." placeholder:"FILE" type:"path"`
	Checkpoint      string `help:"Directory for the checkpoint (checkpoint.strata)." placeholder:"DIR" type:"path"`
	CheckpointEvery int    `help:"Save a checkpoint every N batches, or N epochs training the whole graph (0: only at the end or on interrupt); not in sampled mode with --devices, which saves one after every epoch." default:"0" placeholder:"N"`
	Resume          bool   `help:"Continue from the checkpoint in --checkpoint DIR if there is one."`
	Save            string `help:"Save the trained model into DIR (model.safetensors with PyTorch Geometric's tensor names, and model.json): the epoch --select picks (best validation, or last). 'strata predict', 'embed' and 'evaluate' read it; docs/models.md. Node classification (typed models included) and link prediction (--task link: the encoder and decoder, by validation AUC; one device or --devices, typed rgcn/hsage on one device; not --mode fullgraph)." placeholder:"DIR" type:"path"`

	RelFanouts []string `name:"rel-fanouts" help:"rgcn, hsage: fanouts of some relations, REL=F1,F2,REL2=F1,F2,... (REL a relation's name or src___rel___dst; 0 leaves it out at a hop; the others take --fanouts)." placeholder:"REL=F1,F2"`
	AddReverse bool     `name:"add-reverse" help:"rgcn, hsage: add the reverse of every relation (rev_REL; relations within one type made symmetric), as PyG's ToUndirected."`

	FullGraph fullGraphFlags `embed:""`
	DSP       dspFlags       `embed:""` // sampled mode with --devices (dsp.go)
	Link      linkFlags      `embed:""` // --task link (link.go)
	World     worldFlags     `embed:""` // jobs of several processes (world.go)
}

// common turns the flags every mode reads into train.Common on top of
// the model's defaults: the one translation of the model, optimizer,
// schedule, evaluation and feature flags, from which config (sampled
// training, one device or DSP's) and fullGraphConfig (whole-graph
// training) derive theirs.
func (c *trainCmd) common() (train.Common, error) {
	return c.commonFrom(train.Defaults(c.Model).Common)
}

// commonFrom is common on top of base (another task's defaults).
func (c *trainCmd) commonFrom(base train.Common) (train.Common, error) {
	cfg := base
	setInt(&cfg.Layers, c.Layers)
	setInt(&cfg.Hidden, c.Hidden)
	setInt(&cfg.Heads, c.Heads)
	setInt(&cfg.OutHeads, c.OutHeads)
	setInt(&cfg.Epochs, c.Epochs)
	setFloat(&cfg.Dropout, c.Dropout)
	setFloat(&cfg.AttnDrop, c.AttnDrop)
	setFloat(&cfg.LR, c.LR)
	setFloat(&cfg.WeightDecay, c.WeightDec)
	if c.RowNorm != nil {
		cfg.RowNorm = *c.RowNorm
	}
	if c.Model != train.GAT && (c.Heads != nil || c.OutHeads != nil || c.AttnDrop != nil) {
		return cfg, usageError{fmt.Errorf("--heads, --out-heads and --attn-dropout apply to --model gat only")}
	}
	cfg.Optimizer, cfg.Momentum = c.Optimizer, c.Momentum
	cfg.EvalEvery, cfg.Eval, cfg.EvalBatchSize, cfg.Select, cfg.Seed = c.FullGraph.EvalEvery, c.Eval, c.EvalBatch, c.Select, c.Seed
	cfg.EvalFanouts = c.EvalFan
	var err error
	if cfg.Precision, err = c.precisionName(); err != nil {
		return cfg, err
	}
	if cfg.EvalFanouts == nil && cfg.Eval == train.Sampled {
		cfg.EvalFanouts = c.fanouts(cfg.Layers)
	}
	return cfg, nil
}

// fanouts is --fanouts, by default 10 per hop.
func (c *trainCmd) fanouts(layers int) []int {
	if c.Fanouts != nil {
		return c.Fanouts
	}
	f := make([]int, layers)
	for i := range f {
		f[i] = 10
	}
	return f
}

// config is the configuration of sampled training (train.Run on one
// device, dsp's engines on several): the common settings, the mode and
// the sampling flags.
func (c *trainCmd) config() (train.Config, error) {
	com, err := c.common()
	if err != nil {
		return train.Config{}, err
	}
	d := train.Defaults(c.Model)
	cfg := train.Config{Common: com, Mode: d.Mode, BatchSize: d.BatchSize, Fanouts: c.fanouts(com.Layers)}
	if c.Mode != "" {
		cfg.Mode = c.Mode
	}
	if c.BatchSize != nil {
		cfg.BatchSize = *c.BatchSize
	}
	if err := cfg.Validate(); err != nil {
		return cfg, configFlag(err)
	}
	return cfg, nil
}

// checkCheckpointFlags refuses --resume and --checkpoint-every without
// --checkpoint.
func (c *trainCmd) checkCheckpointFlags() error {
	switch {
	case c.Resume && c.Checkpoint == "":
		return usageError{fmt.Errorf("--resume needs --checkpoint DIR")}
	case c.CheckpointEvery < 0:
		return usageError{fmt.Errorf("--checkpoint-every %d is negative", c.CheckpointEvery)}
	case c.CheckpointEvery > 0 && c.Checkpoint == "":
		return usageError{fmt.Errorf("--checkpoint-every needs --checkpoint DIR")}
	}
	return nil
}

func (c *trainCmd) Run(e *env) error {
	restore, err := c.useEnvironment(e)
	if err != nil {
		return err
	}
	defer restore()
	if c.Link.Task == taskLink {
		return c.runLink(e)
	}
	if set := c.Link.set(); len(set) > 0 {
		return usageError{fmt.Errorf("--%s applies to --task link only", set[0])}
	}
	if err := c.checkTypedFlags(); err != nil {
		return err
	}
	if train.IsHetero(c.Model) {
		return c.runHetero(e) // typed datasets (hetero.go)
	}
	if c.Mode == fullGraphMode {
		return c.runFullGraph(e, false)
	}
	if set := c.FullGraph.set(); len(set) > 0 {
		return usageError{fmt.Errorf("--%s applies to --mode fullgraph only", set[0])}
	}
	if set := c.FullGraph.commSet(); len(set) > 0 && c.FullGraph.Devices == "" {
		return usageError{fmt.Errorf("--%s needs several devices: --devices (or --mode fullgraph)", set[0])}
	}
	if set := c.DSP.set(); len(set) > 0 && c.FullGraph.Devices == "" {
		// The DSP engine's flags on one device: run it as --devices with
		// the one device of --device (cpu:1 on the CPU).
		if err := c.dspOnOneDevice(set[0]); err != nil {
			return err
		}
	}
	job, err := inJob()
	if err != nil {
		return err
	}
	if c.FullGraph.Devices == "" && job && c.sampled() {
		// A process of a job: the one device of --device is its share,
		// trained by the DSP engine with the others' (world.go).
		if err := c.dspOnOneDevice("device"); err != nil {
			return err
		}
	}
	if c.FullGraph.Devices != "" {
		return c.runDSP(e)
	}
	if c.FullGraph.Partition != "multilevel" {
		return usageError{fmt.Errorf("--partition needs --devices (or --mode fullgraph)")}
	}
	if c.World.CommTimeout != "" && c.sampled() {
		return usageError{fmt.Errorf("--comm-timeout applies to several devices (--devices) or processes")}
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if cfg.Mode == train.Full {
		// The whole graph on one device: the full-graph engine's.
		return c.runFullGraph(e, true)
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
	var note io.Writer = e.stderr
	if e.quiet {
		note = nil
	}
	b, err := openDeviceNote(c.Device, note)
	if err != nil {
		return err
	}
	ds, closeDS, err := openDataset(c.Dataset, e.quiet)
	if err != nil {
		return err
	}
	defer closeDS()

	var log io.Writer = e.stderr
	if e.quiet {
		log = nil
	}
	if onHost([]backend.Backend{b}) {
		if err := checkMemory(train.EstimateMemory(cfg, shapeOf(ds)), "", nil); err != nil {
			return err
		}
	}
	if log != nil {
		fmt.Fprintf(log, "training %s on %s (%d nodes, %d edges, %d features, %d classes) on %s\n",
			cfg.Model, ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, ds.NumClasses, b.Name())
		fmt.Fprintf(log, "config: %s\n", cfg.String())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := train.Run(ctx, ds, cfg, train.Options{
		Backend: b, CheckpointDir: c.Checkpoint, CheckpointEvery: c.CheckpointEvery, Resume: c.Resume, Log: log,
		Batches: batchSource(b), Keep: keep,
	})
	if errors.Is(err, train.ErrInterrupted) && c.Checkpoint != "" {
		return fmt.Errorf("%w\ncheckpoint saved in %s: run the same command with --resume to continue", err, c.Checkpoint)
	}
	if err != nil {
		return err
	}
	printAccuracy(e, rep)
	fmt.Fprintf(e.stdout, "time                %.1fs on %s\n", time.Since(start).Seconds(), rep.Device)
	if err := c.saveModel(e, keep, ds, cfg.Common, cfg.Mode, cfg, rep.RowNormalized, storageOf(ds.Features)); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, rep)
}

// printAccuracy prints a run's headline accuracies.
func printAccuracy(e *env, rep *train.Report) {
	sel := "best validation"
	if rep.Selection == train.SelectLast {
		sel = "last"
	}
	fmt.Fprintf(e.stdout, "validation accuracy %.4f\ntest accuracy       %.4f  (epoch %d of %d, %s; last epoch: val %.4f, test %.4f)\n",
		rep.ValAccuracy, rep.TestAccuracy, rep.SelectedEpoch, len(rep.Epochs), sel, rep.LastValAcc, rep.LastTestAcc)
}
