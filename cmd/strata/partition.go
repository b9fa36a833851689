package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/partition"
)

// partitionCmd is 'strata partition DATASET OUT'.
type partitionCmd struct {
	Dataset   string  `arg:"" help:"A Strata dataset directory." placeholder:"DIR"`
	Out       string  `arg:"" help:"Output directory: partition.bin and the renumbered dataset." placeholder:"OUT"`
	Parts     int     `short:"k" default:"2" help:"Number of parts."`
	Imbalance float64 `default:"1.03" help:"Largest part weight over the average, per constraint."`
	Balance   string  `default:"nodes" help:"Constraints to balance, comma-separated: nodes, edges, train."`
	Method    string  `default:"multilevel" enum:"multilevel,metis" help:"multilevel (Strata's own) or metis (libmetis loaded at run time)."`
	Seed      uint64  `default:"1" help:"Random seed."`
	Overwrite bool    `help:"Replace an existing partition in OUT."`
	// The per-machine layout of the DSP engine (partition_machines.go).
	Machines          int    `help:"Write one directory per machine (OUT/machine-M) for a job of this many machines, partitioned as 'strata train --devices' partitions (K = machines x --devices-per-machine parts; --seed is train's --seed; -k and --balance do not apply)." placeholder:"M"`
	DevicesPerMachine int    `help:"With --machines: the devices (ranks) each machine trains on." default:"1" placeholder:"N"`
	HotBytes          string `help:"With --machines: bytes of the globally hottest feature rows every machine holds (read locally, never fetched from another machine): auto (one machine's share of the table), all, 0 or a byte count such as 512MiB." default:"auto" placeholder:"BYTES"`
	Hotness           string `help:"With --machines: how the hot rows are ranked (as train's --hotness ranks what devices cache): in-degree, pagerank or reverse-pagerank." enum:"in-degree,pagerank,reverse-pagerank" default:"in-degree"`
}

func (c *partitionCmd) Run(e *env) error {
	if c.Machines == 0 && c.DevicesPerMachine != 1 {
		return usageError{fmt.Errorf("--devices-per-machine %d: only with --machines", c.DevicesPerMachine)}
	}
	if c.Machines == 0 && (c.HotBytes != "auto" || c.Hotness != "in-degree") {
		return usageError{fmt.Errorf("--hot-bytes and --hotness: only with --machines")}
	}
	if c.Machines != 0 {
		return c.runMachines(e)
	}
	cons, err := partition.ParseConstraints(c.Balance)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := partition.RunOptions{
		Options: partition.Options{
			K: c.Parts, Imbalance: c.Imbalance, Seed: c.Seed, Method: partition.Method(c.Method),
		},
		Constraints: cons,
		Overwrite:   c.Overwrite,
		Out:         e.stdout,
	}
	var bar *progress.Bar
	if !e.quiet {
		bar = progress.New(5, "partition")
	}
	_, err = partition.Run(ctx, c.Dataset, c.Out, opts, bar)
	return err
}
