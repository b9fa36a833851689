package main

import (
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dsp/machines"
)

// DefaultRemoteCache is --remote-cache auto: with the hot rows on every
// machine (strata partition --hot-bytes) the remote rows are the cold
// ones, which an epoch reads again; 256 MiB keeps the products shape's
// cold rows of the other machine (2 machines) after the first epoch and
// is small beside a machine's memory.
const DefaultRemoteCache = 256 << 20

// openMachineDir opens --machine-dir (nil without it) and parses
// --remote-cache.
func (c *trainCmd) openMachineDir(phase func(string, time.Duration)) (*machines.Dir, int64, error) {
	if c.DSP.MachineDir == "" {
		if c.DSP.RemoteCache != "auto" {
			return nil, 0, usageError{fmt.Errorf("--remote-cache needs --machine-dir")}
		}
		return nil, 0, nil
	}
	rc := int64(DefaultRemoteCache)
	if c.DSP.RemoteCache != "auto" {
		var err error
		if rc, err = parseBytes("remote-cache", c.DSP.RemoteCache); err != nil {
			return nil, 0, err
		}
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
