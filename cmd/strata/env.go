package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/tensor/backend"
)

// runEnv lists the environment variables that change a training run
// outside its flags, each with what it is (docs/configuration.md has the
// whole table). 'strata train' prints a line for each one set, so a run
// shaped by its environment says so.
var runEnv = func() []struct{ name, what string } {
	v := []struct{ name, what string }{
		{envTF32, "no longer read: --precision tf32 replaced it"},
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
// the run depends on them) and sets the precision of the devices the run
// opens (--precision, or the deprecated --tf32) until the returned
// function restores it.
func (c *trainCmd) useEnvironment(e *env) (func(), error) {
	noteEnv(e.stderr)
	p, err := c.precision(e)
	if err != nil {
		return nil, err
	}
	saved := devicePrecision
	devicePrecision = p
	return func() { devicePrecision = saved }, nil
}

// precisionName is the run's precision: --precision, or tf32 for the
// deprecated --tf32 (which conflicts with another --precision).
func (c *trainCmd) precisionName() (string, error) {
	if !c.TF32 {
		if _, err := backend.ParsePrecision(c.Precision); err != nil {
			return "", usageError{fmt.Errorf("--precision: %w", err)}
		}
		return c.Precision, nil
	}
	if c.Precision != "fp32" && c.Precision != "tf32" {
		return "", usageError{fmt.Errorf("--tf32 (deprecated) conflicts with --precision %s", c.Precision)}
	}
	return "tf32", nil
}

// precision is precisionName parsed, with a warning for --tf32.
func (c *trainCmd) precision(e *env) (backend.Precision, error) {
	name, err := c.precisionName()
	if err != nil {
		return 0, err
	}
	if c.TF32 {
		fmt.Fprintln(e.stderr, "warning: --tf32 is deprecated: use --precision tf32")
	}
	return backend.ParsePrecision(name)
}
