package importer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/strata-gnn/strata/dataset"
)

// maxIsolatedTail bounds how many nodes beyond the largest ID seen a
// declared node count may add when no per-node file vouches for it, so a
// lying count cannot force a huge allocation.
const maxIsolatedTail = 1 << 24

// boundNodes refuses a node count that no per-node file vouches for when
// it is far larger than the edges can touch: a few bytes such as "0 2000000000"
// must not make the importer allocate gigabytes. Sparse ID spaces should be
// remapped (SNAP) or the count given explicitly.
func boundNodes(path string, n, numEdges int64) error {
	if n > 2*numEdges+maxIsolatedTail {
		return fileErr(path, "%d nodes implied by %d edges: node IDs too sparse (remap IDs, or give the node count explicitly)", n, numEdges)
	}
	return nil
}

// findFile returns dir/base.gz or dir/base, whichever exists ("" if
// none); one that exists but is not a regular file is an error.
func findFile(dir, base string) (string, error) {
	return findRegular(filepath.Join(dir, base+".gz"), filepath.Join(dir, base))
}

// LoadOGB reads an OGB node-property dataset in its raw CSV layout:
//
//	raw/edge.csv.gz          "src,dst" per line (directed unless Symmetrize)
//	raw/num-node-list.csv.gz the node count (one line)
//	raw/num-edge-list.csv.gz the edge count (one line)
//	raw/node-feat.csv.gz     comma-separated floats, one row per node (optional)
//	raw/node-label.csv.gz    one label per line; "nan" or empty = unlabeled (optional)
//	split/<name>/{train,valid,test}.csv.gz  node IDs, one per line (optional)
//
// Files may be plain or .gz, and the raw/ level may be absent (files
// directly in dir). Every count the layout states is checked against what
// is read: the edge lines against num-edge-list, the feature and label rows
// against num-node-list (and each other).
func LoadOGB(dir string, opts Options) (*dataset.Dataset, error) {
	raw := filepath.Join(dir, "raw")
	if p, err := findFile(raw, "edge.csv"); err != nil {
		return nil, err
	} else if p == "" {
		raw = dir
	}
	find := func(base string) (string, error) { return findFile(raw, base) }
	epath, err := find("edge.csv")
	if err != nil {
		return nil, err
	}
	if epath == "" {
		return nil, fmt.Errorf("importer: %s: no edge.csv(.gz) in %s or its raw/ folder", dir, dir)
	}
	n := int64(-1)
	if p, err := find("num-node-list.csv"); err != nil {
		return nil, err
	} else if p != "" {
		if n, err = readCount(p, "node", dataset.MaxNodes, opts.Quiet); err != nil {
			return nil, err
		}
	}
	wantEdges := int64(-1)
	npath, err := find("num-edge-list.csv")
	if err != nil {
		return nil, err
	}
	if npath != "" {
		if wantEdges, err = readCount(npath, "edge", math.MaxInt64/16, opts.Quiet); err != nil {
			return nil, err
		}
	}
	if opts.limitNodes > 0 && n > opts.limitNodes {
		return nil, fileErr(epath, "node count %d exceeds the limit %d", n, opts.limitNodes)
	}
	src, dst, maxID, err := readOGBEdges(epath, n, opts.Quiet)
	if err != nil {
		return nil, err
	}
	if wantEdges >= 0 && int64(len(src)) != wantEdges {
		return nil, fileErr(epath, "has %d edges, %s says %d", len(src), shortName(npath), wantEdges)
	}
	d := &dataset.Dataset{Name: defaultName(dir, opts), Directed: !opts.Symmetrize}
	vouched := false
	fpath, err := find("node-feat.csv")
	if err != nil {
		return nil, err
	}
	if p := fpath; p != "" {
		feats, dim, rows, err := readOGBFeatures(p, opts.Quiet)
		if err != nil {
			return nil, err
		}
		if n >= 0 && rows != n {
			return nil, fileErr(p, "has %d rows, num-node-list says %d nodes", rows, n)
		}
		n, vouched = rows, true
		d.Features, d.FeatDim = feats, dim
	}
	lpath, err := find("node-label.csv")
	if err != nil {
		return nil, err
	}
	if p := lpath; p != "" {
		labels, classes, err := readOGBLabels(p, opts.Quiet)
		if err != nil {
			return nil, err
		}
		if n >= 0 && int64(len(labels)) != n {
			return nil, fileErr(p, "has %d rows, want one per node (%d)", len(labels), n)
		}
		n, vouched = int64(len(labels)), true
		if classes > 0 {
			d.Labels, d.NumClasses = labels, classes
		}
	}
	if n < 0 {
		n = maxID + 1
	}
	if maxID >= n {
		i := slices.IndexFunc(src, func(v int32) bool { return int64(v) >= n })
		if j := slices.IndexFunc(dst, func(v int32) bool { return int64(v) >= n }); i < 0 || (j >= 0 && j < i) {
			i = j
		}
		return nil, lineErr(epath, int64(i)+1, "node ID %d out of range [0, %d)", maxID, n)
	}
	if !vouched {
		if n > maxID+1+maxIsolatedTail {
			return nil, fileErr(epath, "node count %d exceeds the largest node ID %d by more than %d; refusing", n, maxID, maxIsolatedTail)
		}
		if err := boundNodes(epath, n, int64(len(src))); err != nil {
			return nil, err
		}
	}
	if err := checkMemory(epath, n, int64(len(src)), opts); err != nil {
		return nil, err
	}
	d.Graph = buildCSR(n, src, dst, opts.Symmetrize)
	src, dst = nil, nil

	if d.Labels != nil {
		sdir, err := ogbSplitDir(dir, opts.OGBSplit)
		if err != nil {
			return nil, err
		}
		if sdir != "" {
			for _, s := range []struct {
				file string
				out  *[]int32
			}{{"train.csv", &d.Train}, {"valid.csv", &d.Val}, {"test.csv", &d.Test}} {
				p, err := findFile(sdir, s.file)
				if err != nil {
					return nil, err
				}
				if p == "" {
					return nil, fmt.Errorf("importer: %s: no %s(.gz)", sdir, s.file)
				}
				if *s.out, err = readIDList(p, n, opts.Quiet); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", dir, err)
	}
	return d, nil
}

// ogbSplitDir finds split/<name>; with name empty the only split folder.
func ogbSplitDir(dir, name string) (string, error) {
	base := filepath.Join(dir, "split")
	if name != "" {
		p := filepath.Join(base, name)
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("importer: split %q not found in %s", name, base)
		}
		return p, nil
	}
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("importer: %w", err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	switch len(dirs) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(base, dirs[0]), nil
	}
	sort.Strings(dirs)
	return "", fmt.Errorf("importer: %s holds several splits %v; choose one", base, dirs)
}

// readCount reads a num-node-list / num-edge-list file: one count in
// [0, limit] on one line (blank lines ignored).
func readCount(path, what string, limit int64, quiet bool) (int64, error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	lr := newLineReader(in)
	var n int64 = -1
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		if n >= 0 {
			return 0, lineErr(path, lr.line, "several graphs are not supported (a second %s count)", what)
		}
		v, ok := parseInt(b)
		if !ok || v < 0 || v > limit {
			return 0, colErr(path, lr.line, 1, "bad %s count %s (want 0..%d)", what, quote(b), limit)
		}
		n = v
	}
	if n < 0 {
		return 0, fileErr(path, "empty: no %s count", what)
	}
	return n, nil
}

// readOGBEdges parses "src,dst" lines. With n >= 0 IDs are checked against
// it on the spot; otherwise only against MaxNodes.
func readOGBEdges(path string, n int64, quiet bool) (src, dst []int32, maxID int64, err error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, nil, 0, err
	}
	defer in.Close()
	lr := newLineReader(in)
	limit := int64(dataset.MaxNodes)
	if n >= 0 {
		limit = n
	}
	maxID = -1
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, 0, err
		}
		c := bytes.IndexByte(b, ',')
		if c < 0 {
			return nil, nil, 0, colErr(path, lr.line, 1, "want \"src,dst\", got %s", quote(b))
		}
		s, ok1 := parseInt(bytes.TrimSpace(b[:c]))
		t, ok2 := parseInt(bytes.TrimSpace(b[c+1:]))
		switch {
		case !ok1:
			return nil, nil, 0, colErr(path, lr.line, 1, "field 1: want an integer node ID, got %s", quote(b[:c]))
		case !ok2:
			return nil, nil, 0, colErr(path, lr.line, int64(c)+2, "field 2: want an integer node ID, got %s", quote(b[c+1:]))
		case s < 0 || s >= limit:
			return nil, nil, 0, colErr(path, lr.line, 1, "field 1: node ID %d out of range [0, %d)", s, limit)
		case t < 0 || t >= limit:
			return nil, nil, 0, colErr(path, lr.line, int64(c)+2, "field 2: node ID %d out of range [0, %d)", t, limit)
		}
		src = append(src, int32(s))
		dst = append(dst, int32(t))
		maxID = max(maxID, s, t)
	}
	return src, dst, maxID, nil
}

// readOGBFeatures parses comma-separated float rows of equal width.
func readOGBFeatures(path string, quiet bool) (feats []float32, dim int, rows int64, err error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, 0, 0, err
	}
	defer in.Close()
	lr := newLineReader(in)
	dim = -1
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, 0, err
		}
		k := 0
		col := int64(1) // of the current field
		for len(b) > 0 || k == 0 {
			c := bytes.IndexByte(b, ',')
			tok := b
			if c >= 0 {
				tok, b = b[:c], b[c+1:]
			} else {
				b = nil
			}
			v, ok := parseFloat32(bytes.TrimSpace(tok))
			if !ok {
				return nil, 0, 0, colErr(path, lr.line, col, "field %d: bad number %s", k+1, quote(tok))
			}
			feats = append(feats, v)
			k++
			col += int64(len(tok)) + 1
			if c >= 0 && len(b) == 0 {
				return nil, 0, 0, colErr(path, lr.line, col, "field %d: empty", k+1)
			}
		}
		if dim < 0 {
			dim = k
		} else if k != dim {
			return nil, 0, 0, lineErr(path, lr.line, "has %d fields, earlier rows have %d", k, dim)
		}
		rows++
		if rows > dataset.MaxNodes {
			return nil, 0, 0, lineErr(path, lr.line, "more than %d rows", int64(dataset.MaxNodes))
		}
	}
	if rows == 0 {
		return nil, 0, 0, fileErr(path, "no rows")
	}
	return feats, dim, rows, nil
}

// readOGBLabels parses one label per line: an integer, an integral float
// ("3.0"), or "nan"/empty for unlabeled. classes = max label + 1.
func readOGBLabels(path string, quiet bool) (labels []int32, classes int, err error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, 0, err
	}
	defer in.Close()
	lr := newLineReader(in)
	maxL := int64(-1)
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		b = bytes.TrimSpace(b)
		if bytes.IndexByte(b, ',') >= 0 {
			return nil, 0, lineErr(path, lr.line, "several label columns (multi-label tasks are not supported)")
		}
		l, ok := parseLabel(b)
		if !ok {
			return nil, 0, colErr(path, lr.line, 1, "bad label %s (want an integer >= 0, or nan)", quote(b))
		}
		labels = append(labels, int32(l))
		maxL = max(maxL, l)
		if int64(len(labels)) > dataset.MaxNodes {
			return nil, 0, lineErr(path, lr.line, "more than %d rows", int64(dataset.MaxNodes))
		}
	}
	return labels, int(maxL + 1), nil
}

func parseLabel(b []byte) (int64, bool) {
	if len(b) == 0 || bytes.EqualFold(b, []byte("nan")) {
		return -1, true
	}
	if v, ok := parseInt(b); ok {
		return v, v >= 0 && v < math.MaxInt32
	}
	f, ok := parseFloat32(b)
	if !ok || f < 0 || f >= 1<<24 || f != float32(int64(f)) {
		return 0, false
	}
	return int64(f), true
}

// readIDList reads one node ID per line (blank lines ignored), sorts them,
// and rejects duplicates and IDs outside [0, n).
func readIDList(path string, n int64, quiet bool) ([]int32, error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	lr := newLineReader(in)
	var ids []int32
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		v, ok := parseInt(b)
		if !ok || v < 0 || v >= n {
			return nil, colErr(path, lr.line, 1, "bad node ID %s (want an integer in [0, %d))", quote(b), n)
		}
		ids = append(ids, int32(v))
		if int64(len(ids)) > n {
			return nil, lineErr(path, lr.line, "more IDs than nodes (%d)", n)
		}
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return nil, fileErr(path, "node ID %d listed twice", ids[i])
		}
	}
	if ids == nil {
		ids = []int32{}
	}
	return ids, nil
}
