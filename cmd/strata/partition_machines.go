package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/dsp/machines"
)

// runMachines is 'strata partition --machines M DATASET OUT': the DSP
// engine's partition into M x --devices-per-machine parts, one directory
// per machine.
func (c *partitionCmd) runMachines(e *env) error {
	switch {
	case c.Machines < 1 || c.Machines > machines.MaxMachines:
		return usageError{fmt.Errorf("--machines %d: want 1..%d", c.Machines, machines.MaxMachines)}
	case c.DevicesPerMachine < 1 || c.Machines*c.DevicesPerMachine > machines.MaxParts:
		return usageError{fmt.Errorf("--devices-per-machine %d: want 1..%d devices in all (machines x devices per machine)", c.DevicesPerMachine, machines.MaxParts)}
	}
	hot := int64(-2) // auto, sized from the dataset below
	if c.HotBytes != "auto" {
		var err error
		if hot, err = parseBytes("hot-bytes", c.HotBytes); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ds, closeDS, err := openDatasetTimed(c.Dataset, true, nil)
	if err != nil {
		return err
	}
	defer closeDS()
	if ds.Features == nil {
		return usageError{fmt.Errorf("dataset %q has no node features: nothing to shard across machines", c.Dataset)}
	}
	p, err := engine.Partition(ctx, ds, c.Machines*c.DevicesPerMachine, c.Method, c.Seed)
	if err != nil {
		return err
	}
	if hot == -2 {
		hot = machines.DefaultHotBytes(ds.NumNodes(), ds.FeatDim, c.Machines)
	}
	ms, err := machines.Write(c.Out, p, machines.WriteOptions{Machines: c.Machines, DevicesPerMachine: c.DevicesPerMachine, Overwrite: c.Overwrite,
		HotBytes: hot, Hotness: cache.Hotness(c.Hotness)})
	if err != nil {
		return err
	}
	m := ms[0]
	fmt.Fprintf(e.stdout, "partition %s: %s into %d machines x %d devices (%s, seed %d)\n", m.Fingerprint, ds.Name, c.Machines, c.DevicesPerMachine, p.Method, c.Seed)
	if m.HotRows > 0 {
		fmt.Fprintf(e.stdout, "  hot rows: the %d hottest by %s (%.1f%% of %d), on every machine\n", m.HotRows, m.Hotness, 100*float64(m.HotRows)/float64(m.Nodes), m.Nodes)
	}
	for q, mq := range ms {
		fmt.Fprintf(e.stdout, "  %s: rows [%d, %d) of %d (%d feature rows, %d hot rows of other machines)\n", machines.MachineDir(c.Out, q), mq.Lo, mq.Hi, ds.NumNodes(), mq.Hi-mq.Lo, mq.HotLocal)
	}
	return nil
}
