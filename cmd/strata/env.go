package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/internal/excerpt"
)

// runEnv lists the environment variables that change a training run
// outside its flags, each with what it is (docs/configuration.md has the
// whole table). 'strata train' prints a line for each one set, so a run
// shaped by its environment says so.
var runEnv = func() []struct{ name, what string } {
	v := []struct{ name, what string }{
		{envTF32, "the same switch as --tf32"},
		{nccl.EnvAsync, "not read by strata train: the DSP engine's NCCL collectives are asynchronous (--sync-collectives: synchronous), fullgraph's synchronous"},
		{"STRATA_DSP_STAGE_PRIORITY", "no longer read: --no-stage-priority replaced it"},
		{envPoison, "debug: new GPU buffers of AllocRaw are filled with NaN"},
		{gpushm.EnvTrace, "debug: gpushm prints its phase times when it closes"},
	}
	for _, name := range gpushm.EnvNames {
		flag := "--gpushm-" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "STRATA_GPUSHM_")), "_", "-")
		v = append(v, struct{ name, what string }{name, "gpushm: as " + flag + " where that flag is not given"})
	}
	return v
}()

// noteEnv writes a line to w for every variable of runEnv that is set.
func noteEnv(w io.Writer) {
	for _, v := range runEnv {
		if s := os.Getenv(v.name); s != "" {
			fmt.Fprintf(w, "environment: %s=%s (%s; docs/configuration.md)\n", v.name, excerpt.String(s), v.what)
		}
	}
}

// useEnvironment is where 'strata train' reads the variables it honours
// besides its flags: it notes every one set (noteEnv, even with --quiet:
// the run depends on them) and sets the options of the CUDA devices the
// run opens (--tf32, or STRATA_CUDA_TF32) until the returned function
// restores them.
func (c *trainCmd) useEnvironment(e *env) (func(), error) {
	noteEnv(e.stderr)
	o, err := cudaOptionsFromEnv(c.TF32)
	if err != nil {
		return nil, usageError{fmt.Errorf("environment: %w", err)}
	}
	devices := strings.TrimSpace(c.FullGraph.Devices)
	if c.TF32 && (strings.HasPrefix(devices, "cpu") || devices == "" && strings.TrimSpace(c.Device) == "cpu") {
		return nil, usageError{fmt.Errorf("--tf32 applies to CUDA devices; this run is on the CPU")}
	}
	saved := cudaOptions
	cudaOptions = o
	return func() { cudaOptions = saved }, nil
}
