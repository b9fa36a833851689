package importer

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
)

// parseEdgeLine parses one SNAP edge-list line. It returns ok=false with
// skip=true for blank and comment lines ('#' or '%'), and an error message
// for malformed ones. Fields are separated by spaces, tabs or commas; the
// first two are the source and destination IDs (non-negative integers),
// further fields (weights, timestamps) are ignored.
func parseEdgeLine(b []byte) (src, dst int64, skip bool, msg string) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == '#' || b[0] == '%' {
		return 0, 0, true, ""
	}
	f1, rest := nextField(b)
	f2, _ := nextField(rest)
	if len(f2) == 0 {
		return 0, 0, false, fmt.Sprintf("want \"src dst\", got %s", quote(b))
	}
	s, ok1 := parseInt(f1)
	t, ok2 := parseInt(f2)
	if !ok1 || !ok2 {
		return 0, 0, false, fmt.Sprintf("want two integer node IDs, got %s", quote(b))
	}
	if s < 0 || t < 0 {
		return 0, 0, false, fmt.Sprintf("negative node ID in %s", quote(b))
	}
	return s, t, false, ""
}

func isSep(c byte) bool { return c == ' ' || c == '\t' || c == ',' }

// nextField returns the first separator-delimited field of b and the rest.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSep(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSep(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// LoadSNAP reads a SNAP-style edge list (plain or .gz): one "src dst" pair
// per line, '#' / '%' comment lines. The graph is directed unless
// opts.Symmetrize. Without opts.RemapIDs the IDs must be below 2^31-1 and
// the node count is the largest ID + 1 (or opts.NumNodes); with it, the
// IDs that occur are renumbered densely in ascending order. Duplicate edges
// are coalesced. The result has no features or labels.
func LoadSNAP(path string, opts Options) (*dataset.Dataset, error) {
	in, err := openInput(path, opts.Quiet)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	lr := newLineReader(in)
	// IDs are kept as int32 unless they need remapping (16 vs 8 bytes/edge).
	var src, dst []int64
	var s32, d32 []int32
	maxID := int64(-1)
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		s, t, skip, msg := parseEdgeLine(b)
		if skip {
			continue
		}
		if msg != "" {
			return nil, lineErr(path, lr.line, "%s", msg)
		}
		maxID = max(maxID, s, t)
		if opts.RemapIDs {
			src = append(src, s)
			dst = append(dst, t)
			continue
		}
		if maxID >= dataset.MaxNodes {
			return nil, lineErr(path, lr.line, "node ID %d too large (max %d; use ID remapping for sparse IDs)", maxID, int64(dataset.MaxNodes-1))
		}
		s32 = append(s32, int32(s))
		d32 = append(d32, int32(t))
	}
	n := maxID + 1
	if opts.RemapIDs {
		ids := make([]int64, 0, 2*len(src))
		ids = append(append(ids, src...), dst...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if int64(len(ids)) > dataset.MaxNodes {
			return nil, fileErr(path, "%d distinct node IDs, more than %d", len(ids), int64(dataset.MaxNodes))
		}
		n = int64(len(ids))
		remap := func(v []int64) []int32 {
			out := make([]int32, len(v))
			for i, x := range v {
				k, _ := slices.BinarySearch(ids, x)
				out[i] = int32(k)
			}
			return out
		}
		s32, d32 = remap(src), remap(dst)
		src, dst = nil, nil
	}
	if opts.NumNodes == 0 {
		if err := boundNodes(path, n, int64(len(s32))); err != nil {
			return nil, err
		}
	} else {
		if opts.NumNodes < n {
			return nil, fileErr(path, "has %d nodes, more than the %d requested", n, opts.NumNodes)
		}
		if opts.NumNodes > dataset.MaxNodes {
			return nil, fmt.Errorf("importer: node count %d out of range", opts.NumNodes)
		}
		n = opts.NumNodes
	}
	if n > math.MaxInt32 {
		return nil, fileErr(path, "too many nodes (%d)", n)
	}
	d := &dataset.Dataset{
		Name:     defaultName(path, opts),
		Directed: !opts.Symmetrize,
		Graph:    buildCSR(n, s32, d32, opts.Symmetrize),
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", path, err)
	}
	return d, nil
}
