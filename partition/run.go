package partition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/progress"
)

// DatasetDir is the subdirectory of Run's output holding the renumbered
// dataset.
const DatasetDir = "dataset"

// RunOptions controls Run.
type RunOptions struct {
	Options
	// Constraints to balance (default: nodes). ConstraintTrain needs a
	// dataset with a training split.
	Constraints []Constraint
	// Overwrite replaces an existing output directory that holds a
	// partition (never any other non-empty directory).
	Overwrite bool
	// NoSync skips fsync (tests, scratch data).
	NoSync bool
	// Out receives the human-readable report (nil: none).
	Out io.Writer
}

// Report is what Run did.
type Report struct {
	Result  *Result
	Book    []int64 // the offsets of the renumbered parts
	OutDir  string
	Load    time.Duration
	Write   time.Duration
	Elapsed time.Duration
}

// Run partitions the Strata dataset in dsDir and writes outDir, atomically
// (built in a temporary sibling, then renamed):
//
//	outDir/partition.bin  the partition file (book, renumbering, metadata)
//	outDir/dataset/       the dataset renumbered so part p owns IDs
//	                      [offsets[p], offsets[p+1])
//
// It prints the edge cut, the balance of every constraint and the times to
// opts.Out. bar, when not nil, advances by one per phase (5 in all).
func Run(ctx context.Context, dsDir, outDir string, opts RunOptions, bar *progress.Bar) (*Report, error) {
	start := time.Now()
	outDir = filepath.Clean(outDir)
	if err := checkOutDir(outDir, opts.Overwrite); err != nil {
		return nil, err
	}
	step := func(desc string) {
		bar.Describe(desc)
		bar.Add(1)
	}
	ds, err := dataset.Open(dsDir, dataset.OpenOptions{Quiet: true})
	if err != nil {
		return nil, err
	}
	defer ds.Close()
	rep := &Report{OutDir: outDir, Load: time.Since(start)}
	step("symmetrizing")
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	t0 := time.Now()
	s, err := Symmetrize(ds.Graph)
	if err != nil {
		return nil, err
	}
	prep := time.Since(t0)
	o := opts.Options
	if len(opts.Constraints) > 0 && !(len(opts.Constraints) == 1 && opts.Constraints[0] == ConstraintNodes) {
		if o.Weights, err = NodeWeights(s, ds.Train, opts.Constraints...); err != nil {
			return nil, err
		}
	}
	step("partitioning")
	res, err := PartitionSymmetric(ctx, s, o)
	if err != nil {
		return nil, err
	}
	res.Stats.Prepare += prep
	rep.Result = res
	s = nil
	step("renumbering")

	ren, err := Renumber(res.Parts, res.K)
	if err != nil {
		return nil, err
	}
	rep.Book = ren.Book.Offsets()
	pds, err := ren.Apply(ds)
	if err != nil {
		return nil, err
	}
	step("writing")
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	t1 := time.Now()
	imb := o.Imbalance
	if imb == 0 {
		imb = DefaultImbalance
	}
	saved := &Saved{Book: ren.Book, NewToOld: ren.NewToOld, PartWeights: res.PartWeights, NCon: len(res.Constraints),
		Meta: Meta{Dataset: ds.Name, DatasetFingerprint: ds.Fingerprint(), Method: res.Method, Seed: o.Seed, Imbalance: imb, Constraints: res.Constraints,
			Balance: res.Balance, Edges: res.Edges, EdgeCut: res.EdgeCut, Millis: res.Stats.Partition.Milliseconds()}}
	if err := writeOutput(outDir, pds, saved, opts); err != nil {
		return nil, err
	}
	rep.Write = time.Since(t1)
	rep.Elapsed = time.Since(start)
	step("done")
	bar.Finish()
	if opts.Out != nil {
		fmt.Fprint(opts.Out, rep.String())
	}
	return rep, nil
}

// String formats the report: cut, balance per constraint, part sizes,
// times.
func (r *Report) String() string {
	var b strings.Builder
	res := r.Result
	pct := 0.0
	if res.Edges > 0 {
		pct = 100 * float64(res.EdgeCut) / float64(res.Edges)
	}
	fmt.Fprintf(&b, "partition: %d parts (%s), %d nodes, %d undirected edges\n", res.K, res.Method, len(res.Parts), res.Edges)
	fmt.Fprintf(&b, "edge cut:  %d (%.2f%% of edges)\n", res.EdgeCut, pct)
	for c, name := range res.Constraints {
		fmt.Fprintf(&b, "balance:   %-6s %.4f (largest part / average)\n", name, res.Balance[c])
	}
	var sizes []string
	for p := 0; p+1 < len(r.Book); p++ {
		sizes = append(sizes, fmt.Sprint(r.Book[p+1]-r.Book[p]))
	}
	fmt.Fprintf(&b, "parts:     %s nodes\n", strings.Join(sizes, " "))
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Fprintf(&b, "time:      load %v, prepare %v, partition %v, write %v, total %v\n",
		ms(r.Load), ms(res.Stats.Prepare), ms(res.Stats.Partition), ms(r.Write), ms(r.Elapsed))
	if res.Method == Multilevel {
		fmt.Fprintf(&b, "           partition = coarsen %v (%d levels to %d nodes) + initial %v + refine %v\n",
			ms(res.Stats.Coarsen), res.Stats.Levels, res.Stats.CoarsestNodes, ms(res.Stats.Initial), ms(res.Stats.Uncoarsen))
	}
	fmt.Fprintf(&b, "output:    %s\n", r.OutDir)
	return b.String()
}

// checkOutDir refuses to clobber anything but an existing partition output
// (or an empty directory), and only with overwrite.
func checkOutDir(dir string, overwrite bool) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("partition: %s exists and is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	if len(ents) == 0 {
		return nil
	}
	if !overwrite {
		return fmt.Errorf("partition: %s already exists (use overwrite to replace it)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("partition: refusing to replace %s: not empty and not a partition output (no %s)", dir, FileName)
	}
	return nil
}

// writeOutput writes the dataset and the partition file into a temporary
// sibling of outDir and renames it into place.
func writeOutput(outDir string, pds *dataset.Dataset, saved *Saved, opts RunOptions) error {
	parent := filepath.Dir(outDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(outDir)+".tmp-")
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	if err := dataset.Write(filepath.Join(tmp, DatasetDir), pds, dataset.WriteOptions{NoSync: opts.NoSync, Quiet: true}); err != nil {
		return err
	}
	m, err := dataset.ReadManifest(filepath.Join(tmp, DatasetDir))
	if err != nil {
		return err
	}
	saved.Meta.OutputFingerprint = m.Fingerprint()
	if err := WriteFile(filepath.Join(tmp, FileName), saved, opts.NoSync); err != nil {
		return err
	}
	if !opts.NoSync {
		if err := atomicfile.SyncDir(tmp); err != nil {
			return err
		}
	}
	if fi, err := os.Stat(outDir); err == nil && fi.IsDir() {
		old := tmp + ".old"
		if err := os.Rename(outDir, old); err != nil {
			return fmt.Errorf("partition: %w", err)
		}
		if err := os.Rename(tmp, outDir); err != nil {
			os.Rename(old, outDir) // best effort: put the old one back
			return fmt.Errorf("partition: %w", err)
		}
		os.RemoveAll(old)
	} else if err := os.Rename(tmp, outDir); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	ok = true
	if !opts.NoSync {
		return atomicfile.SyncDir(parent)
	}
	return nil
}

// Load reads a partition output directory written by Run: the partition
// file and the renumbered dataset (opened with dopts), which must be the
// one written with the file (node count, and fingerprint when recorded).
func Load(outDir string, dopts dataset.OpenOptions) (*Saved, *dataset.Dataset, error) {
	s, err := ReadFile(filepath.Join(outDir, FileName))
	if err != nil {
		return nil, nil, err
	}
	ds, err := dataset.Open(filepath.Join(outDir, DatasetDir), dopts)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(outDir, FileName)
	if ds.NumNodes() != s.Book.NumNodes() {
		ds.Close()
		return nil, nil, &MismatchError{Path: path, Msg: fmt.Sprintf("the book covers %d nodes but %s has %d", s.Book.NumNodes(), DatasetDir, ds.NumNodes())}
	}
	if want, got := s.Meta.OutputFingerprint, ds.Fingerprint(); want != "" && got != want {
		ds.Close()
		return nil, nil, &MismatchError{Path: path, Msg: fmt.Sprintf("written with the renumbered dataset of fingerprint %s, but %s has %s", want, DatasetDir, got)}
	}
	return s, ds, nil
}
