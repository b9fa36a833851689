package main

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/train"
)

// Every numeric flag of every subcommand is checked here, in kong's
// Validate hook, after the command line and --config are read and before
// Run sizes anything from them: a bad value is a usage error (exit 2) of
// one line naming the flag, the value and the range. The bounds are the
// libraries' own (train.MaxLayers, partition.MaxParts, ...) and are listed
// in docs/limits.md; the libraries check them again for other callers.
// Whether a legal combination fits in memory is checked once the dataset's
// shape is known (memory.go).

// maxQueueCapacity bounds --queue-capacity (dsp/engine's bound).
const maxQueueCapacity = engine.MaxQueueCapacity

// maxStallTimeout bounds --stall-timeout: every wait keeps a deadline.
const maxStallTimeout = 24 * time.Hour

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func rangeErr(flag string, v any, want string) error {
	return usageError{fmt.Errorf("--%s %v: want %s", flag, v, want)}
}

// intIn checks lo <= v <= hi.
func intIn[T int | int64](flag string, v, lo, hi T) error {
	if v < lo || v > hi {
		return rangeErr(flag, v, fmt.Sprintf("%d..%d", lo, hi))
	}
	return nil
}

// optInt is intIn for a flag that may be unset (nil).
func optInt(flag string, v *int, lo, hi int) error {
	if v == nil {
		return nil
	}
	return intIn(flag, *v, lo, hi)
}

// floatIn checks that v is a number in [lo, hi], or [lo, hi) with
// openHi, or (lo, hi] with openLo; hi may be +Inf (v must be finite).
func floatIn(flag string, v *float64, lo, hi float64, openLo, openHi bool) error {
	if v == nil {
		return nil
	}
	x := *v
	ok := !math.IsNaN(x) && !math.IsInf(x, 0) && (x > lo || !openLo && x == lo) && (x < hi || !openHi && x == hi)
	if ok {
		return nil
	}
	l, r := "[", "]"
	if openLo {
		l = "("
	}
	if openHi || math.IsInf(hi, 1) {
		r = ")"
	}
	return rangeErr(flag, x, fmt.Sprintf("a number in %s%g, %g%s", l, lo, hi, r))
}

// prob is a probability flag: [0, 1).
func prob(flag string, v *float64) error { return floatIn(flag, v, 0, 1, false, true) }

// nonNeg is a finite number >= 0.
func nonNeg(flag string, v *float64) error { return floatIn(flag, v, 0, math.Inf(1), false, true) }

// fanoutList checks a list of fanouts: at most train.MaxLayers entries,
// each in 1..train.MaxFanout or -1 (all neighbors).
func fanoutList(flag string, f []int) error {
	if len(f) > train.MaxLayers {
		return rangeErr(flag, joinInts(f), fmt.Sprintf("at most %d entries (one per layer)", train.MaxLayers))
	}
	for _, v := range f {
		if v != -1 && (v < 1 || v > train.MaxFanout) {
			return rangeErr(flag, joinInts(f), fmt.Sprintf("each in 1..%d, or -1 for all neighbors (got %d)", train.MaxFanout, v))
		}
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// durationFlag checks a duration flag given as text ("" = unset).
func durationFlag(flag, s string, maxD time.Duration) error {
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxD {
		return usageError{fmt.Errorf("--%s %q: want a positive duration such as 60s, at most %s", flag, s, maxD)}
	}
	return nil
}

// Validate is kong's hook for 'strata train': every numeric flag, in
// every mode (flags a mode does not read are refused later, by name).
func (c *trainCmd) Validate() error {
	f, d := &c.FullGraph, &c.DSP
	if d.Engine != "" {
		return usageError{fmt.Errorf("--engine %s: the host engine is gone; --devices always runs the one DSP engine (dsp/engine), on CPU virtual devices and GPUs alike: drop --engine", d.Engine)}
	}
	switch c.Mode {
	case "", train.Sampled, train.Full, "fullgraph":
	default:
		return usageError{fmt.Errorf("--mode %q: want sampled, full or fullgraph", c.Mode)}
	}
	err := firstError(
		optInt("layers", c.Layers, 1, train.MaxLayers),
		optInt("hidden", c.Hidden, 1, train.MaxWidth),
		optInt("heads", c.Heads, 1, train.MaxHeads),
		optInt("out-heads", c.OutHeads, 1, train.MaxHeads),
		prob("dropout", c.Dropout),
		prob("attn-dropout", c.AttnDrop),
		floatIn("lr", c.LR, 0, math.Inf(1), true, true),
		nonNeg("weight-decay", c.WeightDec),
		prob("momentum", &c.Momentum),
		optInt("epochs", c.Epochs, 1, train.MaxEpochs),
		optInt("batch-size", c.BatchSize, 1, train.MaxBatch),
		fanoutList("fanouts", c.Fanouts),
		fanoutList("eval-fanouts", c.EvalFan),
		intIn("eval-batch-size", c.EvalBatch, 1, train.MaxBatch),
		intIn("checkpoint-every", c.CheckpointEvery, 0, math.MaxInt32),
		optInt("staleness-epochs", f.StaleEp, 1, train.MaxEpochs),
		nonNeg("staleness-eps", f.StaleEps),
		intIn("eval-every", f.EvalEvery, 1, train.MaxEpochs),
		intIn("cache-group", d.CacheGroup, 1, maxListedDevices),
		intIn("queue-capacity", d.QueueCapacity, 1, maxQueueCapacity),
		intIn("sampler-workers", d.SamplerWorkers, 1, engine.MaxSamplerWorkers),
		durationFlag("stall-timeout", d.StallTimeout, maxStallTimeout),
		c.Link.validate(),
	)
	if err != nil {
		return err
	}
	if _, err := parseBytes("cache", d.Cache); err != nil {
		return err
	}
	if _, err := parseBytes("topology-cache", d.TopologyCache); err != nil {
		return err
	}
	if strings.TrimSpace(f.Devices) != "" {
		if _, err := parseDevices(f.Devices); err != nil {
			return err
		}
	}
	return nil
}

// Validate is kong's hook for 'strata import'. The memory an import needs
// for --num-nodes is checked by the importer once the edges are counted
// (importer.MemoryError).
func (c *importCmd) Validate() error {
	return firstError(
		intIn("split", c.Split, 0, math.MaxInt32),
		intIn("num-nodes", c.NumNodes, 0, dataset.MaxNodes),
		c.validateTables(),
	)
}

// Validate is kong's hook for 'strata partition'.
func (c *partitionCmd) Validate() error {
	imb := c.Imbalance
	return firstError(
		intIn("parts", c.Parts, 1, partition.MaxParts),
		floatIn("imbalance", &imb, 1, 10, false, false),
	)
}

// Validate is kong's hook for 'strata gen': the ranges of gen.Config
// (gen.MaxNumNodes, ...) that need no other field; gen.Config.Validate
// then checks the fields against each other and the estimated memory
// (genFlag names the flag).
func (c *genCmd) Validate() error {
	scale := c.Scale
	err := firstError(
		floatIn("scale", &scale, 0, 1e6, true, false),
		floatIn("avg-degree", c.AvgDegree, 0, gen.MaxNumNodes, true, false),
		floatIn("max-degree", c.MaxDegree, 0, gen.MaxNumNodes, true, false),
		floatIn("exponent", c.Exponent, 1, 10, true, false),
		floatIn("class-skew", c.Skew, 0, 2, false, false),
		floatIn("homophily", c.Homophily, 0, 1, false, false),
		floatIn("noise", c.Noise, 0, 1000, false, false),
		floatIn("train-frac", c.Train, 0, 1, false, false),
		floatIn("val-frac", c.Val, 0, 1, false, false),
		floatIn("test-frac", c.Test, 0, 1, false, false),
	)
	if err != nil {
		return err
	}
	if c.Nodes != nil {
		if err := intIn("nodes", *c.Nodes, 1, gen.MaxNumNodes); err != nil {
			return err
		}
	}
	if c.Classes != nil {
		if err := intIn("classes", *c.Classes, 1, gen.MaxNumClasses); err != nil {
			return err
		}
	}
	if c.Features != nil {
		return intIn("features", *c.Features, 0, gen.MaxFeatDim)
	}
	return nil
}

// genFlags maps gen.Config fields to the flags of 'strata gen' that set
// them or that the field is checked against (a --nodes too small for the
// preset's degree cap is named with --max-degree).
var genFlags = map[string]string{
	"NumNodes": "--nodes, --scale", "AvgDegree": "--avg-degree", "MaxDegree": "--max-degree, --avg-degree, --nodes",
	"Exponent": "--exponent", "NumClasses": "--classes, --nodes", "ClassSkew": "--class-skew",
	"Homophily": "--homophily, --classes", "FeatDim": "--features", "Noise": "--noise",
	"TrainFrac": "--train-frac", "ValFrac": "--val-frac", "TestFrac": "--test-frac, --train-frac, --val-frac", "scale": "--scale",
}

// genFlag turns a *gen.ConfigError into a usage error naming the flags of
// its field.
func genFlag(err error) error {
	var ce *gen.ConfigError
	if errors.As(err, &ce) {
		if flags, ok := genFlags[ce.Field]; ok {
			return usageError{fmt.Errorf("%s: %s", flags, ce.Msg)}
		}
	}
	return usageError{err}
}

// configFlags maps the fields of train, fullgraph and dsp/engine config
// errors whose flag is not the field with '-' for '_'.
var configFlags = map[string]string{
	"staleness.epoch_bound": "staleness-epochs", "staleness.epsilon": "staleness-eps", "staleness.drift": "staleness-drift",
	"staleness": "staleness", "order": "node-order", "cache_bytes": "cache", "topology_bytes": "topology-cache",
	"wait_timeout": "stall-timeout", "sampler": "gpu-sampler",
	"relation": "link-relation",
}

// configFlag turns a library's config error into a usage error naming the
// flag of its field ("--batch-size: 0 not in [1, 16777216]").
func configFlag(err error) error {
	var field, msg string
	var te *train.ConfigError
	var fe *fullgraph.ConfigError
	var re *engine.ConfigError
	switch {
	case errors.As(err, &te):
		field, msg = te.Field, te.Msg
	case errors.As(err, &fe):
		field, msg = fe.Field, fe.Msg
	case errors.As(err, &re):
		field, msg = re.Field, re.Msg
	default:
		return usageError{err}
	}
	flag, ok := configFlags[field]
	if !ok {
		flag = strings.ReplaceAll(field, "_", "-")
	}
	return usageError{fmt.Errorf("--%s: %s", flag, msg)}
}
