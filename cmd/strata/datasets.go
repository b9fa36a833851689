package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/importer"
)

// builtinNames lists the datasets compiled into the binary.
var builtinNames = builtin.Names()

// loadBuiltin loads a built-in dataset; ok is false when name is not one.
func loadBuiltin(name string) (ds *dataset.Dataset, ok bool, err error) {
	if !slices.Contains(builtinNames, name) {
		return nil, false, nil
	}
	ds, err = builtin.Load(name)
	return ds, true, err
}

// openDataset resolves --dataset: a built-in name, a Strata dataset
// directory (manifest.json), or a directory or file the importer
// understands (loaded in memory without writing anything). The returned
// function releases the dataset.
func openDataset(spec string, quiet bool) (*dataset.Dataset, func(), error) {
	return openDatasetTimed(spec, quiet, nil)
}

// openDatasetTimed is openDataset telling onPhase (when not nil) how long
// its steps took: dataset.Open's (OpenOptions.OnPhase) for a dataset
// directory, the whole load as "open" otherwise.
func openDatasetTimed(spec string, quiet bool, onPhase func(string, time.Duration)) (*dataset.Dataset, func(), error) {
	noop := func() {}
	t0 := time.Now()
	whole := func() {
		if onPhase != nil {
			onPhase("open", time.Since(t0))
		}
	}
	if ds, ok, err := loadBuiltin(spec); ok || err != nil {
		if err != nil {
			return nil, noop, err
		}
		whole()
		return ds, noop, nil
	}
	if _, err := os.Stat(spec); err != nil {
		return nil, noop, usageError{fmt.Errorf("--dataset %q is neither a built-in dataset (%s) nor a readable path: %w",
			spec, strings.Join(builtinNames, ", "), err)}
	}
	if isDir, err := hasManifest(spec); err != nil {
		return nil, noop, err
	} else if isDir {
		ds, err := dataset.Open(spec, dataset.OpenOptions{Quiet: quiet, OnPhase: onPhase})
		if errors.Is(err, dataset.ErrHeterogeneous) {
			return nil, noop, usageError{fmt.Errorf("--dataset %s is a typed dataset (format version %d): train it with --model rgcn or hsage", spec, dataset.FormatVersionHetero)}
		}
		if err != nil {
			return nil, noop, err
		}
		return ds, func() { ds.Close() }, nil
	}
	kind, err := importer.Detect(spec)
	if err != nil {
		return nil, noop, fmt.Errorf("--dataset %s: no %s and not importable: %w", spec, dataset.ManifestFile, err)
	}
	ds, err := importer.Load(kind, spec, importer.Options{Quiet: quiet})
	if err != nil {
		return nil, noop, err
	}
	whole()
	return ds, noop, nil
}
