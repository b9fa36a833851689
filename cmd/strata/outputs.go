package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/train"
)

// checkOutputs checks, before a run, that --report and --plot name files
// that can be written (in a directory that takes files, created if
// missing; not a directory or a device; a plot format that is drawn), so
// that a run does not train for hours and then fail to save its results.
func (c *trainCmd) checkOutputs() error {
	for _, o := range []struct {
		flag, path string
		check      func(string) error
	}{{"--report", c.Report, atomicfile.Check}, {"--plot", c.Plot, train.CheckPlotPath}} {
		if o.path == "" {
			continue
		}
		dir := filepath.Dir(o.path)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return usageError{fmt.Errorf("%s: %w", o.flag, err)}
			}
		}
		if err := o.check(o.path); err != nil {
			return usageError{fmt.Errorf("%s: %w", o.flag, err)}
		}
	}
	return nil
}

// writeOutputs writes --report (with writeReport) and --plot (the curves
// of plot) once the results are on stdout, so that a failure here (a
// full disk) leaves them printed; the error names the file.
func (c *trainCmd) writeOutputs(writeReport func(string) error, plot *train.Report) error {
	var errs []error
	if c.Report != "" {
		if err := writeReport(c.Report); err != nil {
			errs = append(errs, fmt.Errorf("--report: %w", err))
		}
	}
	if c.Plot != "" {
		if err := train.WritePlot(plot, c.Plot); err != nil {
			errs = append(errs, fmt.Errorf("--plot: %w", err))
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w; %w", errs[0], errs[1])
}
