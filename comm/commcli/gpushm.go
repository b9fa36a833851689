package commcli

import (
	"errors"
	"fmt"

	"github.com/strata-gnn/strata/comm/gpushm"
)

// GPUShmFlags are the tuning flags of the GPU shared-memory back end
// (comm/gpushm), shared by 'strata bench comm' and 'strata train --mode
// fullgraph' (embedded in both). Each sets the gpushm.Options field of
// the same name; zero (or empty) keeps the default, and a
// STRATA_GPUSHM_* variable (gpushm.FromEnv) may still set a field its
// flag leaves at zero.
type GPUShmFlags struct {
	ChunkBytes  int    `name:"gpushm-chunk-bytes" placeholder:"BYTES" help:"gpushm: largest chunk of the host pipeline (a multiple of 4096 from 64 KiB to 64 MiB; 0: 4 MiB)."`
	Slots       int    `name:"gpushm-slots" placeholder:"N" help:"gpushm: chunks in flight (2..64; 0: 8)."`
	Workers     int    `name:"gpushm-workers" placeholder:"N" help:"gpushm: reducer goroutines per rank (0: about NumCPU/ranks - 1, at most 8)."`
	Chunks      int    `name:"gpushm-chunks" placeholder:"N" help:"gpushm: chunks a message of the host pipeline is cut into (0: 8)."`
	DeviceMax   int    `name:"gpushm-device-max" placeholder:"BYTES" help:"gpushm: largest all-reduce the GPUs reduce themselves (the device path; 0: 16 MiB; -1: none, every all-reduce through the host pipeline)."`
	DeviceChunk int    `name:"gpushm-device-chunk" placeholder:"BYTES" help:"gpushm: largest chunk of the device path (a multiple of 4096 from 64 KiB; 0: 4 MiB)."`
	Async       bool   `name:"gpushm-async" help:"gpushm: device-path all-reduces return once queued on the GPU's stream (as NCCL's do) instead of when complete."`
	Idle        string `name:"gpushm-idle" placeholder:"MODE" help:"gpushm: how waits sleep once spinning stops: precise (the default) or gosleep (time.Sleep, about 1 ms; for comparison)."`
}

// flagOfField names each tuning field's flag.
var flagOfField = map[string]string{
	"ChunkBytes": "gpushm-chunk-bytes", "Slots": "gpushm-slots", "Workers": "gpushm-workers", "Chunks": "gpushm-chunks",
	"DeviceMax": "gpushm-device-max", "DeviceChunk": "gpushm-device-chunk", "Async": "gpushm-async", "Idle": "gpushm-idle",
}

// Options returns base with the fields the flags set.
func (f GPUShmFlags) Options(base gpushm.Options) gpushm.Options {
	base.ChunkBytes, base.Slots, base.Workers, base.Chunks = f.ChunkBytes, f.Slots, f.Workers, f.Chunks
	base.DeviceMax, base.DeviceChunk, base.Async, base.Idle = f.DeviceMax, f.DeviceChunk, f.Async, f.Idle
	return base
}

// Validate is kong's hook: a value gpushm refuses is reported with its
// flag (exit 2).
func (f GPUShmFlags) Validate() error {
	err := f.Options(gpushm.Options{}).Validate()
	var oe *gpushm.OptionError
	if errors.As(err, &oe) {
		return flagErr(flagOfField[oe.Field], oe.Value, oe.Want)
	}
	return err
}

// Set names the flags given values other than their defaults, in the
// order of the struct.
func (f GPUShmFlags) Set() []string {
	var out []string
	for _, c := range []struct {
		on    bool
		field string
	}{{f.ChunkBytes != 0, "ChunkBytes"}, {f.Slots != 0, "Slots"}, {f.Workers != 0, "Workers"}, {f.Chunks != 0, "Chunks"},
		{f.DeviceMax != 0, "DeviceMax"}, {f.DeviceChunk != 0, "DeviceChunk"}, {f.Async, "Async"}, {f.Idle != "", "Idle"}} {
		if c.on {
			out = append(out, flagOfField[c.field])
		}
	}
	return out
}

// EnvOptions is Options followed by gpushm.FromEnv: the flags' values,
// then the STRATA_GPUSHM_* variables for the fields the flags leave at
// zero. It returns the variables that were set (for a notice) and an
// error naming a variable whose value is bad.
func (f GPUShmFlags) EnvOptions(base gpushm.Options) (gpushm.Options, []string, error) {
	o, used, err := gpushm.FromEnv(f.Options(base))
	if err != nil {
		return o, used, fmt.Errorf("environment: %w", err)
	}
	return o, used, nil
}
