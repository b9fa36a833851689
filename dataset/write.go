package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/strata-gnn/strata/internal/progress"
)

// WriteOptions controls Write.
type WriteOptions struct {
	// Overwrite replaces an existing dataset directory at dir. Without it
	// Write fails if dir exists. Even with it, a non-empty directory that
	// holds no manifest.json is never replaced.
	Overwrite bool
	// NoSync skips fsync (tests and scratch data); the rename stays atomic
	// but a crash may leave truncated files behind it.
	NoSync bool
	// Quiet disables the progress bar (otherwise shown for >= 64 MiB).
	Quiet bool
	// Sidecar, when set, is called with the temporary directory after the
	// arrays are written and before the manifest, to add files that belong
	// with the dataset (an importer's ID mapping, edge splits). They land
	// atomically with it; Open ignores them and no checksum covers them.
	// It must not write manifest.json or any array file.
	Sidecar func(tmpDir string) error
}

// progressMin is the total size above which Write and Open show a bar.
const progressMin = 64 << 20

type outArray struct {
	name  string
	shape []int64
	data  []byte                       // raw host bytes
	conv  func(dst []byte, off, n int) // big-endian hosts: encode elements [off, off+n) into dst
	esize int
	dtype DType
}

func makeOut[T element](name string, s []T, shape ...int64) outArray {
	a := outArray{name: name, shape: shape, data: asBytes(s), esize: sizeOf[T](), dtype: dtypeOf[T]()}
	if !hostLE {
		a.conv = func(dst []byte, off, n int) { encodeLE(dst, s[off:off+n]) }
	}
	return a
}

// dtypeOf is the manifest name of element type T.
func dtypeOf[T element]() DType {
	var z T
	switch any(z).(type) {
	case int32:
		return Int32
	case int64:
		return Int64
	case float32:
		return Float32
	}
	return ""
}

// outArrays lists the arrays of d that a writer stores, in manifest
// order. The shapes follow the counts of a valid dataset.
func outArrays(d *Dataset) []outArray {
	n, e := d.Graph.NumRows, int64(len(d.Graph.Indices))
	arrs := []outArray{
		makeOut(ArrIndptr, d.Graph.Indptr, n+1),
		makeOut(ArrIndices, d.Graph.Indices, e),
	}
	if d.Graph.Weights != nil {
		arrs = append(arrs, makeOut(ArrWeights, d.Graph.Weights, e))
	}
	if d.Features != nil {
		arrs = append(arrs, makeOut(ArrFeatures, d.Features, n, int64(d.FeatDim)))
	}
	if d.Labels != nil {
		arrs = append(arrs, makeOut(ArrLabels, d.Labels, n))
	}
	for _, s := range []struct {
		name string
		ids  []int32
	}{{ArrTrain, d.Train}, {ArrVal, d.Val}, {ArrTest, d.Test}} {
		if s.ids != nil {
			arrs = append(arrs, makeOut(s.name, s.ids, int64(len(s.ids))))
		}
	}
	return arrs
}

// Write stores d as a Strata dataset directory at dir, atomically: the
// arrays and manifest are written (and fsynced) into a temporary sibling
// directory, which is then renamed to dir. d is validated first; an invalid
// dataset is never written.
func Write(dir string, d *Dataset, opts WriteOptions) error {
	if err := Validate(d); err != nil {
		return fmt.Errorf("dataset: refusing to write invalid dataset: %w", err)
	}
	n, e := d.Graph.NumRows, d.Graph.NumEdges()
	m := &Manifest{
		Magic: Magic, Version: FormatVersion, Name: d.Name,
		NumNodes: n, NumEdges: e, Directed: d.Directed,
		FeatDim: int64(d.FeatDim), NumClasses: int64(d.NumClasses),
		Checksum: ChecksumAlgo,
	}
	return writeDir(dir, outArrays(d), opts,
		func(arrays []ArrayMeta) ([]byte, error) {
			m.Arrays = arrays
			var err error
			if m.ManifestCRC32C, err = manifestCRC(m); err != nil {
				return nil, err
			}
			return json.MarshalIndent(m, "", "  ")
		})
}

// writeDir is the writing sequence of every format version: it writes
// arrs (their checksums computed on the way) into a
// temporary sibling of dir, then the manifest that manifest encodes from
// the arrays' metadata (in arrs' order), fsyncs, and renames the
// directory to dir.
func writeDir(dir string, arrs []outArray, opts WriteOptions, manifest func([]ArrayMeta) ([]byte, error)) error {
	dir = filepath.Clean(dir)
	if err := checkTarget(dir, opts.Overwrite); err != nil {
		return err
	}
	var total int64
	for _, a := range arrs {
		total += int64(len(a.data))
	}

	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("dataset: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()

	var bar *progress.Bar
	if !opts.Quiet && total >= progressMin {
		bar = progress.New(total, "writing "+filepath.Base(dir))
	}
	metas := make([]ArrayMeta, len(arrs))
	var g errgroup.Group
	g.SetLimit(max(2, min(runtime.GOMAXPROCS(0), 4)))
	for i, a := range arrs {
		g.Go(func() error {
			block := blockSizeFor(int64(len(a.data)))
			crcs, err := writeArray(filepath.Join(tmp, ArrayFile(a.name)), a, int(block), !opts.NoSync, bar)
			if err != nil {
				return err
			}
			metas[i] = ArrayMeta{Name: a.name, DType: a.dtype, Shape: a.shape,
				Bytes: int64(len(a.data)), BlockBytes: block, CRC32C: crcs}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	bar.Finish()
	if opts.Sidecar != nil {
		if err := opts.Sidecar(tmp); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(tmp, ManifestFile)); err == nil {
			return fmt.Errorf("dataset: Sidecar wrote %s", ManifestFile)
		}
	}
	mb, err := manifest(metas)
	if err != nil {
		return fmt.Errorf("dataset: encoding manifest: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, ManifestFile), append(mb, '\n'), !opts.NoSync); err != nil {
		return err
	}
	if !opts.NoSync {
		if err := syncDir(tmp); err != nil {
			return err
		}
	}
	if err := replaceDir(tmp, dir, opts.Overwrite); err != nil {
		return err
	}
	ok = true
	if !opts.NoSync {
		return syncDir(filepath.Dir(dir))
	}
	return nil
}

// checkTarget refuses to clobber anything but an existing dataset (or an
// empty directory) and only with overwrite set.
func checkTarget(dir string, overwrite bool) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if !overwrite {
		return fmt.Errorf("dataset: %s already exists (set Overwrite to replace it)", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("dataset: %s exists and is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if len(ents) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("dataset: refusing to replace %s: not empty and not a Strata dataset (no %s)", dir, ManifestFile)
	}
	return nil
}

func replaceDir(tmp, dir string, overwrite bool) error {
	if _, err := os.Stat(dir); err == nil && overwrite {
		old := tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			os.Rename(old, dir) // best effort: put the old one back
			return fmt.Errorf("dataset: %w", err)
		}
		os.RemoveAll(old)
		return nil
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	return nil
}

// writeArray writes a to path one checksum block per write call, computing
// the block CRC-32Cs on the way (the data are never copied on little-endian
// hosts).
func writeArray(path string, a outArray, block int, sync bool, bar *progress.Bar) (crcs []string, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("dataset: %w", cerr)
		}
	}()
	var buf []byte
	if a.conv != nil {
		buf = make([]byte, min(block, len(a.data)))
	}
	crcs = make([]string, 0, numBlocks(int64(len(a.data)), int64(block)))
	for off := 0; off < len(a.data); off += block {
		chunk := a.data[off:min(off+block, len(a.data))]
		if a.conv != nil {
			chunk = buf[:len(chunk)]
			a.conv(chunk, off/a.esize, len(chunk)/a.esize)
		}
		crcs = append(crcs, crcHex(crc32.Checksum(chunk, castagnoli)))
		if _, err := f.Write(chunk); err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
		bar.Add(int64(len(chunk)))
	}
	if sync {
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
	}
	return crcs, nil
}

func writeFileSync(path string, b []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("dataset: %w", err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("dataset: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("dataset: fsync %s: %w", dir, err)
	}
	return nil
}
