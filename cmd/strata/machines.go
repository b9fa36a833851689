package main

import (
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dsp/machines"
)

// openMachineDir opens --machine-dir (nil without it) and parses
// --remote-cache.
func (c *trainCmd) openMachineDir(phase func(string, time.Duration)) (*machines.Dir, int64, error) {
	rc, err := parseBytes("--remote-cache", c.DSP.RemoteCache)
	if err != nil {
		return nil, 0, err
	}
	if c.DSP.MachineDir == "" {
		if rc != 0 {
			return nil, 0, usageError{fmt.Errorf("--remote-cache needs --machine-dir")}
		}
		return nil, 0, nil
	}
	if rc < 0 {
		return nil, 0, usageError{fmt.Errorf("--remote-cache %q: give a byte count (all has no meaning for other machines' rows)", c.DSP.RemoteCache)}
	}
	t0 := time.Now()
	d, err := machines.Open(c.DSP.MachineDir)
	if err != nil {
		return nil, 0, err
	}
	phase("open", time.Since(t0))
	return d, rc, nil
}
