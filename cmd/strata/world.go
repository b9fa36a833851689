package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/train"
)

// worldFlags are the flags of a job of several processes ('strata train'
// under 'strata launch', torchrun or srun: see joinJob and
// docs/distributed.md). They are embedded in trainCmd.
type worldFlags struct {
	CommTimeout string `name:"comm-timeout" help:"Several devices or processes: the deadline of every collective, and in a job of several processes (strata launch, torchrun, srun) of every wait for another process: one that dies or stalls fails the others within it, naming it. E.g. 60s (default 5m; --stall-timeout sets it too)." placeholder:"DURATION"`
}

// defaultCommTimeout is --comm-timeout's default (the engines' too).
const defaultCommTimeout = 5 * time.Minute

// commTimeout is --comm-timeout, else --stall-timeout, else 0 (the
// engine's default).
func (c *trainCmd) commTimeout() (time.Duration, error) {
	for _, f := range []struct{ name, v string }{{"comm-timeout", c.World.CommTimeout}, {"stall-timeout", c.DSP.StallTimeout}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d <= 0 {
			return 0, usageError{fmt.Errorf("--%s %q: want a positive duration such as 60s", f.name, f.v)}
		}
		return d, nil
	}
	return 0, nil
}

// joinJob joins the job this process belongs to when its environment
// describes one of several processes: 'strata launch' and torchrun
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or an srun task
// (SLURM_PROCID, SLURM_NTASKS, ...; rendezvous.Detect). It returns nil
// for a lone process. The process owns the devices of set; every
// process must pass the same training flags (compared through the
// store: a process that differs is refused, naming the first flag). The
// processes other than process 0 go quiet: process 0 logs and reports.
// The caller must Leave the world (with its error) when done.
func (c *trainCmd) joinJob(ctx context.Context, e *env, set deviceSet) (*world.World, error) {
	env, src, err := rendezvous.Detect(os.LookupEnv)
	if err != nil {
		return nil, usageError{fmt.Errorf("environment: %w", err)}
	}
	if src == rendezvous.SourceNone || env.WorldSize < 2 {
		return nil, nil
	}
	peer, err := c.commTimeout()
	if err != nil {
		return nil, err
	}
	if peer == 0 {
		peer = defaultCommTimeout
	}
	conf, err := c.jobConfig(set)
	if err != nil {
		return nil, err
	}
	if !e.quiet {
		fmt.Fprintf(e.stderr, "joining a job of %d processes as process %d (%s environment, store %s)\n", env.WorldSize, env.Rank, src, env.Addr())
	}
	w, err := world.Join(ctx, env, world.Options{Devices: len(set.Specs), Config: conf, PeerTimeout: peer})
	if err != nil {
		return nil, err
	}
	if w.Process() != 0 {
		e.quiet = true
		progress.Quiet = true // main restores it
	} else if !e.quiet {
		info := w.Info()
		fmt.Fprintf(e.stderr, "job: %d ranks over %d processes on %d machine(s), %s between processes\n", info.Ranks, info.Processes, info.Machines, info.Comm)
	}
	return w, nil
}

// jobConfig is what every process of a job must pass identically: the
// training flags by name, less those that are each process's own (its
// devices, of which only the kind must agree, and where process 0 writes
// the report and plot).
func (c *trainCmd) jobConfig(set deviceSet) ([]byte, error) {
	flags := map[string]any{}
	flagValues(reflect.ValueOf(*c), flags)
	for _, own := range []string{"device", "report", "plot", "machine-dir"} {
		delete(flags, own)
	}
	flags["devices"] = set.Kind
	b, err := json.Marshal(flags)
	if err != nil {
		return nil, fmt.Errorf("job configuration: %w", err)
	}
	return b, nil
}

// flagValues adds the flags of the kong command struct v to out, by flag
// name (the name tag, else the field name in kebab case, as kong names
// them; embedded structs flattened).
func flagValues(v reflect.Value, out map[string]any) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("kong") == "-" {
			continue
		}
		if _, ok := f.Tag.Lookup("embed"); ok && f.Type.Kind() == reflect.Struct {
			flagValues(v.Field(i), out)
			continue
		}
		name := f.Tag.Get("name")
		if name == "" {
			name = kebab(f.Name)
		}
		out[name] = v.Field(i).Interface()
	}
}

// kebab turns a Go field name into kong's flag name (BatchSize ->
// batch-size, TF32 -> tf32).
func kebab(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// agreeDataset checks that every process of w loaded the same dataset
// (its shape; the data itself is each process's to read).
func agreeDataset(ctx context.Context, w *world.World, ds *dataset.Dataset) error {
	if w == nil {
		return nil
	}
	b, _ := json.Marshal(struct {
		Name                      string
		Nodes, Edges              int64
		Features, Classes, Trains int
	}{ds.Name, ds.NumNodes(), ds.Graph.NumEdges(), ds.FeatDim, ds.NumClasses, len(ds.Train)})
	return w.Agree(ctx, "dataset", b)
}

// jobSummary is the one line a process other than process 0 prints at
// the end of a job (process 0 prints the results).
func jobSummary(e *env, w *world.World, what string) {
	me := w.Self()
	ranks := fmt.Sprintf("rank %d", me.First)
	if me.Devices > 1 {
		ranks = fmt.Sprintf("ranks %d-%d", me.First, me.First+me.Devices-1)
	}
	fmt.Fprintf(e.stdout, "process %d of %d (host %s, %s): %s; process 0 reports the results\n", me.Index, len(w.Processes()), me.Host, ranks, what)
}

// inJob reports whether the environment describes a job of several
// processes (joinJob joins it), or what is wrong with the description.
func inJob() (bool, error) {
	env, src, err := rendezvous.Detect(os.LookupEnv)
	if err != nil {
		return false, usageError{fmt.Errorf("environment: %w", err)}
	}
	return src != rendezvous.SourceNone && env.WorldSize > 1, nil
}

// sampled reports whether the run trains sampled mini-batches (--mode,
// else the model's default).
func (c *trainCmd) sampled() bool {
	mode := c.Mode
	if mode == "" {
		mode = train.Defaults(c.Model).Mode
	}
	return mode == train.Sampled
}
