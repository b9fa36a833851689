package commcli

import (
	"fmt"
	"time"

	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/internal/sysmem"
)

// Bounds of the flags, checked by kong's Validate hook before Run (a bad
// value exits 2 with one line naming the flag; docs/limits.md lists them).
const (
	maxGrace       = time.Hour
	maxTimeout     = 24 * time.Hour
	maxBenchBytes  = 16 << 30 // commbench's bound on a message
	maxBenchFactor = 1 << 10
	maxRepeats     = 1000
	maxBudget      = 1 << 40
)

func flagErr(flag string, v any, want string) error {
	dash := "--"
	if len(flag) == 1 {
		dash = "-"
	}
	return fmt.Errorf("%s%s %v: want %s", dash, flag, v, want)
}

func intIn(flag string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return flagErr(flag, v, fmt.Sprintf("%d..%d", lo, hi))
	}
	return nil
}

// Validate is kong's hook for 'strata launch'.
func (c *LaunchCmd) Validate() error {
	if err := intIn("n", int64(c.N), 1, launch.MaxProcs); err != nil {
		return err
	}
	if err := intIn("master-port", int64(c.MasterPort), 0, 65535); err != nil {
		return err
	}
	if c.Grace < 0 || c.Grace > maxGrace {
		return flagErr("grace", c.Grace, fmt.Sprintf("a duration in 0s..%s", maxGrace))
	}
	return nil
}

// Validate is kong's hook for 'strata bench comm': the ranges, and the
// buffers of every rank (a send and a receive buffer of --max-bytes each)
// against the memory the machine has left.
func (c *BenchCommCmd) Validate() error {
	for _, chk := range []error{
		intIn("procs", int64(c.Procs), 1, launch.MaxProcs),
		intIn("min-bytes", c.MinBytes, 8, maxBenchBytes),
		intIn("max-bytes", c.MaxBytes, max(c.MinBytes, 8), maxBenchBytes),
		intIn("factor", c.Factor, 2, maxBenchFactor),
		intIn("repeats", int64(c.Repeats), 1, maxRepeats),
		intIn("budget", c.Budget, 1, maxBudget),
	} {
		if chk != nil {
			return chk
		}
	}
	if c.Timeout <= 0 || c.Timeout > maxTimeout {
		return flagErr("timeout", c.Timeout, fmt.Sprintf("a positive duration, at most %s", maxTimeout))
	}
	need := float64(c.Procs) * 2 * float64(c.MaxBytes)
	if b, ok := sysmem.Available(); ok && need > float64(b.Bytes) {
		return fmt.Errorf("--max-bytes %d: %d ranks with two buffers each need about %s, more than the %s",
			c.MaxBytes, c.Procs, sysmem.Format(int64(need)), b)
	}
	return nil
}
