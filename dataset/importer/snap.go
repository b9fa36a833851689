package importer

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

// edgeLine is one parsed SNAP edge-list line.
type edgeLine struct {
	src, dst int64
	weight   float32
	fields   int // 2, or 3 with a weight
}

// parseEdgeLine parses one SNAP edge-list line. It returns skip=true for
// blank and comment lines ('#' or '%'), and an error (with the 1-based
// column of the bad field, 0 for the line as a whole) for malformed ones.
// Fields are separated by spaces, tabs or commas: "src dst" or "src dst
// weight", IDs non-negative integers, the weight a finite float32. More
// fields are refused rather than ignored.
func parseEdgeLine(b []byte) (e edgeLine, skip bool, col int, msg string) {
	line := b
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == '#' || b[0] == '%' {
		return e, true, 0, ""
	}
	var f [4][]byte
	var at [4]int
	rest := line
	k := 0
	for ; k < len(f); k++ {
		var fld []byte
		fld, rest = nextField(rest)
		if len(fld) == 0 {
			break
		}
		f[k], at[k] = fld, len(line)-len(rest)-len(fld)+1
	}
	switch {
	case k < 2:
		return e, false, 1, fmt.Sprintf("want \"src dst\" or \"src dst weight\", got %s", quote(b))
	case k > 3:
		return e, false, at[3], fmt.Sprintf("more than 3 fields (want \"src dst\" or \"src dst weight\"): %s", quote(b))
	}
	e.fields = k
	var ok bool
	for i, p := range []*int64{&e.src, &e.dst} {
		if *p, ok = parseInt(f[i]); !ok {
			return e, false, at[i], fmt.Sprintf("field %d: want an integer node ID, got %s", i+1, quote(f[i]))
		}
		if *p < 0 {
			return e, false, at[i], fmt.Sprintf("field %d: negative node ID %d", i+1, *p)
		}
	}
	if k == 3 {
		if e.weight, ok = parseFloat32(f[2]); !ok {
			return e, false, at[2], fmt.Sprintf("field 3: want a finite edge weight, got %s", quote(f[2]))
		}
	}
	return e, false, 0, ""
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

// LoadSNAP reads a SNAP-style edge list (plain or .gz): one "src dst" or
// "src dst weight" per line, '#' / '%' comment lines. Either every edge
// line has a weight (the graph gets edge weights) or none has; mixing the
// two, or a fourth field, is an error naming the line. The graph is
// directed unless opts.Symmetrize. Without opts.RemapIDs the IDs must be
// below 2^31-1 and the node count is the largest ID + 1 (or
// opts.NumNodes); with it, the IDs that occur are renumbered densely in
// ascending order. Duplicate edges are coalesced (their weights summed,
// as PyG's coalesce does; with Symmetrize an edge listed in both
// directions therefore gets the sum of both weights). The result has no
// features or labels.
func LoadSNAP(path string, opts Options) (*dataset.Dataset, error) {
	if opts.NumNodes > 0 { // refuse an impossible node count before reading
		if err := checkMemory(path, opts.NumNodes, 0, opts); err != nil {
			return nil, err
		}
	}
	in, err := openInput(path, opts.Quiet)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	lr := newLineReader(in)
	// IDs are kept as int32 unless they need remapping (16 vs 8 bytes/edge).
	var src, dst []int64
	var s32, d32 []int32
	var weights []float32
	fields, firstLine := 0, int64(0) // of the first edge line
	maxID := int64(-1)
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		e, skip, col, msg := parseEdgeLine(b)
		if skip {
			continue
		}
		if msg != "" {
			return nil, colErr(path, lr.line, int64(col), "%s", msg)
		}
		if fields == 0 {
			fields, firstLine = e.fields, lr.line
		} else if e.fields != fields {
			return nil, lineErr(path, lr.line, "%d fields, but line %d has %d: either every edge has a weight (\"src dst weight\") or none has", e.fields, firstLine, fields)
		}
		if fields == 3 {
			weights = append(weights, e.weight)
		}
		s, t := e.src, e.dst
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
	if opts.limitNodes > 0 && n > opts.limitNodes {
		return nil, fileErr(path, "%d nodes exceed the limit %d", n, opts.limitNodes)
	}
	if err := checkMemory(path, n, int64(len(s32)), opts); err != nil {
		return nil, err
	}
	var g *graph.CSR
	if fields == 3 {
		g = buildWeightedCSR(n, s32, d32, weights, opts.Symmetrize)
	} else {
		g = buildCSR(n, s32, d32, opts.Symmetrize)
	}
	d := &dataset.Dataset{
		Name:     defaultName(path, opts),
		Directed: !opts.Symmetrize,
		Graph:    g,
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", path, err)
	}
	return d, nil
}
