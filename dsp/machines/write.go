package machines

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/partition/book"
)

// Partitioned is a dataset renumbered by a partition into one part per
// device of the job (what the DSP engine computes: engine.Partition).
type Partitioned struct {
	Orig     *dataset.Dataset // as loaded (original IDs)
	Dataset  *dataset.Dataset // renumbered, with features
	Book     *book.Book
	NewToOld []int32 // original ID of every new ID
	Method   string
	Seed     uint64
	// NonNegative and MostlyZero describe the whole feature table.
	NonNegative, MostlyZero bool
}

// WriteOptions configure Write.
type WriteOptions struct {
	Machines          int
	DevicesPerMachine int
	// Overwrite replaces an existing output written by Write (never any
	// other non-empty directory).
	Overwrite bool
	NoSync    bool
	// HotBytes is the budget of the hot rows every machine holds (see
	// hot.go; HotRowsOf): 0 none, -1 every row; DefaultHotBytes is the
	// command's default. Hotness ranks them (default in-degree).
	HotBytes int64
	Hotness  cache.Hotness
}

// MachineDir is machine m's directory under out.
func MachineDir(out string, m int) string { return filepath.Join(out, fmt.Sprintf("machine-%d", m)) }

// Write writes one directory per machine under out (out/machine-M),
// built in a temporary sibling of out and renamed into place. It returns
// every machine's manifest.
func Write(out string, p *Partitioned, o WriteOptions) ([]*Manifest, error) {
	ds := p.Dataset
	parts := o.Machines * o.DevicesPerMachine
	switch {
	case o.Machines < 1 || o.Machines > MaxMachines:
		return nil, fmt.Errorf("machines: %d machines, want 1..%d", o.Machines, MaxMachines)
	case o.DevicesPerMachine < 1 || parts > MaxParts:
		return nil, fmt.Errorf("machines: %d devices per machine x %d machines, want 1..%d in all", o.DevicesPerMachine, o.Machines, MaxParts)
	case p.Book == nil || p.Book.K() != parts:
		return nil, fmt.Errorf("machines: a partition into %d parts, want %d (machines x devices per machine)", p.Book.K(), parts)
	case ds.Features == nil || ds.FeatDim < 1:
		return nil, fmt.Errorf("machines: dataset %q has no node features to shard", ds.Name)
	case int64(len(p.NewToOld)) != ds.NumNodes():
		return nil, fmt.Errorf("machines: %d renumbering entries for %d nodes", len(p.NewToOld), ds.NumNodes())
	}
	out = filepath.Clean(out)
	if err := checkOut(out, o.Overwrite); err != nil {
		return nil, err
	}
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	off := p.Book.Offsets()
	weights := make([]int64, parts)
	for q := range parts {
		weights[q] = off[q+1] - off[q]
	}
	saved := &partition.Saved{Book: p.Book, NewToOld: p.NewToOld, PartWeights: weights, NCon: 1,
		Meta: partition.Meta{Dataset: p.Orig.Name, DatasetFingerprint: p.Orig.Fingerprint(), Method: partition.Method(p.Method), Seed: p.Seed,
			Constraints: []string{"nodes"}, Balance: []float64{0}}}
	topo := &dataset.Dataset{Name: ds.Name, Graph: ds.Graph, Directed: ds.Directed, NumClasses: ds.NumClasses, Labels: ds.Labels,
		Train: ds.Train, Val: ds.Val, Test: ds.Test}
	// The hot set: the same on every machine.
	var hotIDs []int32
	hotness := o.Hotness
	if hotness == "" {
		hotness = cache.ByInDegree
	}
	if h := HotRowsOf(o.HotBytes, ds.NumNodes(), ds.FeatDim); h > 0 {
		in := ds.InGraph()
		if in == nil {
			return nil, fmt.Errorf("machines: dataset %q: invalid graph", ds.Name)
		}
		order, err := hotOrder(in, hotness)
		if err != nil {
			return nil, err
		}
		hotIDs = make([]int32, h)
		for i := range hotIDs {
			hotIDs[i] = int32(order[i])
		}
	}
	var mans []*Manifest
	for m := range o.Machines {
		dir := MachineDir(tmp, m)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("machines: %w", err)
		}
		lo, hi := MachineRange(off, o.DevicesPerMachine, m)
		man := &Manifest{Format: Format, Machine: m, Machines: o.Machines, DevicesPerMachine: o.DevicesPerMachine,
			Dataset: p.Orig.Name, DatasetFingerprint: p.Orig.Fingerprint(), Method: p.Method, Seed: p.Seed, Nodes: ds.NumNodes(),
			Cols: ds.FeatDim, Book: off, Lo: lo, Hi: hi, NonNegative: p.NonNegative, MostlyZero: p.MostlyZero}
		if len(hotIDs) > 0 {
			man.Hotness, man.HotRows, man.HotIDsSHA256 = string(hotness), int64(len(hotIDs)), hotHash(int32Bytes(hotIDs))
			if err := writeHot(dir, man, hotIDs, ds.Features, ds.FeatDim); err != nil {
				return nil, err
			}
		}
		man.Fingerprint = fingerprint(man)
		mans = append(mans, man)
		if err := dataset.Write(filepath.Join(dir, DatasetDir), topo, dataset.WriteOptions{NoSync: o.NoSync, Quiet: true}); err != nil {
			return nil, err
		}
		c := int64(ds.FeatDim)
		if err := npy.WriteFloat32(filepath.Join(dir, FeaturesFile), int(hi-lo), ds.FeatDim, ds.Features[lo*c:hi*c]); err != nil {
			return nil, fmt.Errorf("machines: %w", err)
		}
		if err := partition.WriteFile(filepath.Join(dir, PartitionFile), saved, o.NoSync); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteJSON(filepath.Join(dir, ManifestFile), man); err != nil {
			return nil, fmt.Errorf("machines: %w", err)
		}
	}
	if !o.NoSync {
		if err := atomicfile.SyncDir(tmp); err != nil {
			return nil, fmt.Errorf("machines: %w", err)
		}
	}
	if _, err := os.Stat(out); err == nil {
		if err := os.RemoveAll(out); err != nil {
			return nil, fmt.Errorf("machines: replacing %s: %w", out, err)
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	ok = true
	return mans, nil
}

// checkOut refuses a non-empty out that Write did not write (unless
// overwrite and it did).
func checkOut(out string, overwrite bool) error {
	fi, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("machines: %s exists and is not a directory", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	if len(ents) == 0 {
		return nil
	}
	if !overwrite {
		return fmt.Errorf("machines: %s already exists (use --overwrite to replace it)", out)
	}
	if _, err := os.Stat(filepath.Join(MachineDir(out, 0), ManifestFile)); err != nil {
		return fmt.Errorf("machines: refusing to replace %s: not empty and not machine directories (no machine-0/%s)", out, ManifestFile)
	}
	return nil
}
