package importer

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/regfile"
)

// TableOptions describes an import of an edge table and an optional node
// table, each a CSV file (with a header row; plain or .gz) or a Parquet
// file, as GraphBolt's OnDiskDataset and PyG users lay them out.
//
// Column names left empty take the first default present in the file
// (DefaultColumns); "-" ignores a column even if present.
type TableOptions struct {
	Options
	// Edges is the edge table (required); Nodes the node table (optional).
	Edges, Nodes string
	// Delimiter separates CSV fields; 0 means ',' (a tab for .tsv files).
	Delimiter byte

	// Edge table columns: source and destination node IDs, an optional
	// weight, an optional edge type.
	Src, Dst, Weight, EdgeType string
	// Node table columns: the node ID (absent: node i is row i), feature
	// columns (names or globs such as "feat_*", in the order given, or one
	// list column), the label, the split, an optional node type.
	ID       string
	Features []string
	Label    string
	Split    string
	NodeType string
}

// DefaultColumns lists, for each column option, the names tried in order
// when the option is empty.
var DefaultColumns = map[string][]string{
	"src":       {"src", "source", "src_id", "from", "u"},
	"dst":       {"dst", "target", "dst_id", "to", "v"},
	"weight":    {"weight", "edge_weight", "w"},
	"edge-type": {"etype", "edge_type"},
	"id":        {"id", "node_id", "nid"},
	"features":  {"feat", "features", "x", "emb", "embedding", "feat_*", "feature_*", "x_*"},
	"label":     {"label", "y", "labels"},
	"split":     {"split"},
	"node-type": {"ntype", "node_type"},
}

// maskColumns are PyG-style boolean split columns, read when there is no
// split column.
var maskColumns = [3][]string{{"train_mask"}, {"val_mask", "valid_mask"}, {"test_mask"}}

// TableImport is the result of LoadTables.
type TableImport struct {
	Dataset *dataset.Dataset
	// NodeIDs holds the original ID of every node when IDs were not
	// already the node numbers 0..N-1 (nil otherwise).
	NodeIDs *NodeIDs
	// ClassNames holds the name of every class when labels were names
	// (class c is ClassNames[c], in ascending order); nil for integer
	// labels.
	ClassNames []string
}

// LoadTables reads an edge table and an optional node table into a
// dataset.
//
// Node numbering: with a node table, node i is its row i and the edge
// table's IDs are looked up among the node table's IDs (an unknown ID is
// an error naming its row). Without one, integer IDs in [0, 2^31-1) are
// the node numbers (as for SNAP edge lists), unless opts.RemapIDs; any
// other IDs (negative or larger integers, text) or RemapIDs number the
// IDs that occur 0..N-1 in ascending order (integers numerically, text
// bytewise). IDs compare as text: see key.
//
// Typed input (an edge or node type column with more than one type) is
// refused with *UnsupportedError: typed datasets (format version 2) come
// from the typed layouts (LoadHetero) for now.
func LoadTables(opts TableOptions) (*TableImport, error) {
	if opts.Edges == "" {
		return nil, fmt.Errorf("importer: no edge table")
	}
	res := &TableImport{}
	var nodes *nodeTable
	if opts.Nodes != "" {
		var err error
		if nodes, err = readNodeTable(opts); err != nil {
			return nil, err
		}
	}
	et, err := readEdgeTable(opts, nodes)
	if err != nil {
		return nil, err
	}
	n := int64(0)
	switch {
	case nodes != nil:
		n = nodes.rows
		res.NodeIDs = nodes.ids.list()
	case et.remap != nil:
		perm, ids := et.remap.sortedPerm()
		for i := range et.src {
			et.src[i], et.dst[i] = perm[et.src[i]], perm[et.dst[i]]
		}
		n = int64(len(perm))
		res.NodeIDs = ids
	default:
		n = et.maxID + 1
	}
	if opts.NumNodes > 0 {
		if nodes != nil {
			return nil, fmt.Errorf("importer: a node count (%d) and a node table (%s) both given: the node table's rows are the nodes", opts.NumNodes, opts.Nodes)
		}
		if opts.NumNodes < n {
			return nil, fileErr(opts.Edges, "has %d nodes, more than the %d requested", n, opts.NumNodes)
		}
		if opts.NumNodes > dataset.MaxNodes {
			return nil, fmt.Errorf("importer: node count %d out of range", opts.NumNodes)
		}
		n = opts.NumNodes
	} else if nodes == nil && et.remap == nil {
		if err := boundNodes(opts.Edges, n, int64(len(et.src))); err != nil {
			return nil, err
		}
	}
	if opts.limitNodes > 0 && n > opts.limitNodes {
		return nil, fileErr(opts.Edges, "%d nodes exceed the limit %d", n, opts.limitNodes)
	}
	if err := checkMemory(opts.Edges, n, int64(len(et.src)), opts.Options); err != nil {
		return nil, err
	}
	var g *graph.CSR
	if et.weights != nil {
		g = buildWeightedCSR(n, et.src, et.dst, et.weights, opts.Symmetrize)
	} else {
		g = buildCSR(n, et.src, et.dst, opts.Symmetrize)
	}
	d := &dataset.Dataset{Name: defaultTableName(opts), Graph: g, Directed: !opts.Symmetrize}
	if nodes != nil {
		if err := nodes.fill(d, res); err != nil {
			return nil, err
		}
	}
	if err := dataset.Validate(d); err != nil {
		return nil, fmt.Errorf("importer: %s: %w", opts.Edges, err)
	}
	res.Dataset = d
	return res, nil
}

func defaultTableName(opts TableOptions) string {
	if opts.Name != "" {
		return opts.Name
	}
	b := path.Base(strings.ReplaceAll(opts.Edges, "\\", "/"))
	for _, ext := range []string{".gz", ".csv", ".tsv", ".txt", ".parquet", ".pq"} {
		b = strings.TrimSuffix(b, ext)
	}
	for _, suf := range []string{"_edges", "-edges", ".edges", "edges"} {
		if s := strings.TrimSuffix(b, suf); s != "" && s != b {
			return s
		}
	}
	return b
}

// ---- table readers ----

type cellKind uint8

const (
	cNull cellKind = iota
	cInt
	cFloat
	cText
	cBool
	cList
)

// cell is one value of a table. b and list are valid only during the
// visit that receives them.
type cell struct {
	kind cellKind
	i    int64
	f    float64
	b    []byte
	list []float32
}

// colInfo describes a table column.
type colInfo struct {
	name string
	list bool   // a Parquet list column
	bad  string // why the column cannot be read ("" if it can)
}

// tableReader streams the selected columns of a table.
type tableReader interface {
	columns() []colInfo
	// scan calls grow(n) before it visits rows [r, r+n), then visit(row,
	// k, cell) once for each of those rows and each k (an index into
	// cols). CSV visits row by row; Parquet column by column within a row
	// group, each column in row order. A cellProblem returned by visit is
	// reported with the file, row and column.
	scan(cols []int, grow func(n int64) error, visit func(row int64, k int, c *cell) error) error
	Close() error
}

// openTable opens a CSV or Parquet table (Parquet is recognized by its
// leading "PAR1" magic).
func openTable(p string, delim byte, opts Options) (tableReader, error) {
	f, _, err := regfile.Open(p)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	var magic [4]byte
	k, _ := io.ReadFull(f, magic[:])
	f.Close()
	if k == 4 && string(magic[:]) == "PAR1" {
		return openParquet(p, opts)
	}
	if delim == 0 {
		delim = ','
		if strings.HasSuffix(strings.TrimSuffix(p, ".gz"), ".tsv") {
			delim = '\t'
		}
	}
	return openCSV(p, delim, opts.Quiet)
}

// pickColumn resolves one column option: "-" is none, a name must exist,
// "" takes the first default present (or none).
func pickColumn(cols []colInfo, file, option, given string) (int, error) {
	if given == "-" {
		return -1, nil
	}
	if given != "" {
		if i := findColumn(cols, given); i >= 0 {
			return i, nil
		}
		return -1, &TableError{Path: file, Msg: fmt.Sprintf("no column %s for --%s-col (columns: %s)", quote([]byte(given)), option, columnList(cols))}
	}
	for _, d := range DefaultColumns[option] {
		if i := findColumn(cols, d); i >= 0 {
			return i, nil
		}
	}
	return -1, nil
}

func findColumn(cols []colInfo, name string) int {
	for i, c := range cols {
		if c.name == name {
			return i
		}
	}
	return -1
}

func columnList(cols []colInfo) string {
	var names []string
	for i, c := range cols {
		if i == 12 {
			names = append(names, fmt.Sprintf("... %d more", len(cols)-i))
			break
		}
		names = append(names, quote([]byte(c.name)))
	}
	return strings.Join(names, ", ")
}

// featureColumns resolves the feature option: each entry is a column name
// or a glob (path.Match syntax) whose matches are taken in file order.
// With no entries, the first default that matches anything is used.
func featureColumns(cols []colInfo, file string, given []string) ([]int, error) {
	match := func(pat string) []int {
		var out []int
		for i, c := range cols {
			if ok, _ := path.Match(pat, c.name); ok || c.name == pat {
				out = append(out, i)
			}
		}
		return out
	}
	if len(given) == 1 && given[0] == "-" {
		return nil, nil
	}
	if len(given) == 0 {
		for _, d := range DefaultColumns["features"] {
			if m := match(d); len(m) > 0 {
				return m, nil
			}
		}
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, g := range given {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("importer: --feature-cols: bad pattern %s: %v", quote([]byte(g)), err)
		}
		m := match(g)
		if len(m) == 0 {
			return nil, &TableError{Path: file, Msg: fmt.Sprintf("no column matches %s for --feature-cols (columns: %s)", quote([]byte(g)), columnList(cols))}
		}
		for _, i := range m {
			if seen[i] {
				return nil, &TableError{Path: file, Column: cols[i].name, Msg: "selected twice by --feature-cols"}
			}
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}

// checkReadable refuses selected columns the reader cannot convert.
func checkReadable(cols []colInfo, file string, sel []int) error {
	for _, i := range sel {
		if cols[i].bad != "" {
			return &UnsupportedError{Path: file, Column: cols[i].name, Msg: cols[i].bad}
		}
	}
	return nil
}

// ---- cell conversions ----

func describe(c *cell) string {
	switch c.kind {
	case cNull:
		return "an empty value"
	case cInt:
		return fmt.Sprintf("%d", c.i)
	case cFloat:
		return fmt.Sprintf("%v", c.f)
	case cText:
		return quote(c.b)
	case cBool:
		return fmt.Sprintf("%v", c.i != 0)
	case cList:
		return fmt.Sprintf("a list of %d", len(c.list))
	}
	return "?"
}

// cellKey reads a node ID.
func cellKey(c *cell) (key, error) {
	switch c.kind {
	case cInt:
		return key{isInt: true, i: c.i}, nil
	case cText:
		return textKey(c.b), nil
	case cNull:
		return key{}, problem("missing node ID")
	}
	return key{}, problem("want an integer or text node ID, got %s", describe(c))
}

// cellFloat32 reads a finite float32.
func cellFloat32(c *cell, what string) (float32, error) {
	switch c.kind {
	case cInt:
		return float32(c.i), nil
	case cFloat:
		if math.IsNaN(c.f) || math.IsInf(c.f, 0) || math.Abs(c.f) > math.MaxFloat32 {
			return 0, problem("%s %v is not a finite float32", what, c.f)
		}
		return float32(c.f), nil
	case cText:
		if v, ok := parseFloat32(bytes.TrimSpace(c.b)); ok {
			return v, nil
		}
	case cBool:
		return float32(c.i), nil
	}
	return 0, problem("want a finite number as %s, got %s", what, describe(c))
}

// cellSmallInt reads an integer (ints, integral floats, integer text).
func cellSmallInt(c *cell) (int64, bool) {
	switch c.kind {
	case cInt, cBool:
		return c.i, true
	case cFloat:
		if c.f == math.Trunc(c.f) && math.Abs(c.f) < 1<<53 {
			return int64(c.f), true
		}
	case cText:
		return parseInt(bytes.TrimSpace(c.b))
	}
	return 0, false
}

// ---- edge table ----

type edgeTable struct {
	src, dst []int32
	weights  []float32
	maxID    int64
	remap    *keySpace // IDs interned (no node table; text or out-of-range IDs, or RemapIDs)
	filled   [2]int64  // rows of src and dst set so far
}

func readEdgeTable(opts TableOptions, nodes *nodeTable) (*edgeTable, error) {
	t, err := openTable(opts.Edges, opts.Delimiter, opts.Options)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	cols := t.columns()
	file := opts.Edges
	si, err := pickColumn(cols, file, "src", opts.Src)
	if err != nil {
		return nil, err
	}
	di, err := pickColumn(cols, file, "dst", opts.Dst)
	if err != nil {
		return nil, err
	}
	if si < 0 || di < 0 {
		return nil, &TableError{Path: file, Msg: fmt.Sprintf("no source or destination column (want %s and %s, or set --src-col and --dst-col; columns: %s)",
			strings.Join(DefaultColumns["src"], "/"), strings.Join(DefaultColumns["dst"], "/"), columnList(cols))}
	}
	if si == di {
		return nil, &TableError{Path: file, Column: cols[si].name, Msg: "is both the source and the destination column"}
	}
	wi, err := pickColumn(cols, file, "weight", opts.Weight)
	if err != nil {
		return nil, err
	}
	ti, err := pickColumn(cols, file, "edge-type", opts.EdgeType)
	if err != nil {
		return nil, err
	}
	sel := []int{si, di}
	if wi >= 0 {
		sel = append(sel, wi)
	}
	if ti >= 0 {
		sel = append(sel, ti)
	}
	if err := checkReadable(cols, file, sel); err != nil {
		return nil, err
	}
	et := &edgeTable{maxID: -1}
	if nodes == nil && opts.RemapIDs {
		et.remap = &keySpace{}
	}
	if wi >= 0 {
		et.weights = []float32{}
	}
	types := typeColumn{kind: "edge"}
	grow := func(n int64) error {
		et.src = slices.Grow(et.src, int(n))[:len(et.src)+int(n)]
		et.dst = slices.Grow(et.dst, int(n))[:len(et.dst)+int(n)]
		if et.weights != nil {
			et.weights = slices.Grow(et.weights, int(n))[:len(et.weights)+int(n)]
		}
		return nil
	}
	visit := func(row int64, k int, c *cell) error {
		switch sel[k] {
		case si, di:
			side := 0
			if sel[k] == di {
				side = 1
			}
			v, err := et.node(c, nodes, side, row)
			if err != nil {
				return err
			}
			if side == 0 {
				et.src[row] = v
			} else {
				et.dst[row] = v
			}
			et.filled[side] = row + 1
		case wi:
			w, err := cellFloat32(c, "edge weight")
			if err != nil {
				return err
			}
			et.weights[row] = w
		case ti:
			return types.see(row, c)
		}
		return nil
	}
	if err := t.scan(sel, grow, visit); err != nil {
		return nil, err
	}
	if types.distinct > 1 {
		return nil, types.refuse(file, cols[ti].name)
	}
	return et, nil
}

// node maps an ID cell of the edge table to a node number.
func (et *edgeTable) node(c *cell, nodes *nodeTable, side int, row int64) (int32, error) {
	k, err := cellKey(c)
	if err != nil {
		return 0, err
	}
	if nodes != nil {
		v, ok := nodes.ids.lookup(k)
		if !ok {
			return 0, problem("node ID %s is not in the node table %s", keyText(k), nodes.path)
		}
		return v, nil
	}
	if et.remap == nil {
		if k.isInt && k.i >= 0 && k.i < dataset.MaxNodes {
			et.maxID = max(et.maxID, k.i)
			return int32(k.i), nil
		}
		// The first ID that is not a node number: number every ID by
		// interning, starting with those read so far.
		et.remap = &keySpace{}
		for s := range 2 {
			arr := et.src
			if s == 1 {
				arr = et.dst
			}
			for i := range et.filled[s] {
				arr[i] = et.remap.intern(key{isInt: true, i: int64(arr[i])})
			}
		}
	}
	return et.remap.intern(k), nil
}

func keyText(k key) string {
	if k.isInt {
		return fmt.Sprintf("%d", k.i)
	}
	return quote(k.s)
}

// typeColumn watches an edge or node type column: one type is a plain
// graph; several need the typed format.
type typeColumn struct {
	kind       string
	distinct   int
	first      string
	firstRow   int64
	second     string
	secondRow  int64
	firstIsSet bool
}

func (t *typeColumn) see(row int64, c *cell) error {
	var s string
	switch c.kind {
	case cText:
		s = string(c.b)
	case cNull:
		s = ""
	default:
		s = describe(c)
	}
	if !t.firstIsSet {
		t.first, t.firstRow, t.firstIsSet, t.distinct = s, row, true, 1
		return nil
	}
	if s != t.first && t.distinct == 1 {
		t.second, t.secondRow, t.distinct = s, row, 2
	}
	return nil
}

func (t *typeColumn) refuse(file, col string) error {
	return &UnsupportedError{Path: file, Column: col, Msg: fmt.Sprintf(
		"typed tables are not supported yet: more than one %s type (%s at row %d, %s at row %d); import a typed graph from .npy files per type (--kind npy-typed) or OGB's heterogeneous layout (--kind ogb-hetero), one type at a time from tables, or ignore the column with --%s-type-col=-",
		t.kind, quote([]byte(t.first)), t.firstRow+1, quote([]byte(t.second)), t.secondRow+1, t.kind)}
}

// ---- node table ----

type nodeTable struct {
	path    string
	rows    int64
	ids     keySpace
	hasID   bool
	featDim int64 // -1 until known
	feats   []float32
	labels  []int32
	labCol  string
	classes *keySpace // label names (nil for integer labels)
	labMode int8      // 0 unknown, 1 integers, 2 names
	split   []int8    // -1 none, 0 train, 1 val, 2 test
	masks   [3][]bool
	hasMask bool
	splCol  string
}

func readNodeTable(opts TableOptions) (*nodeTable, error) {
	t, err := openTable(opts.Nodes, opts.Delimiter, opts.Options)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	cols := t.columns()
	file := opts.Nodes
	nt := &nodeTable{path: file, featDim: -1}
	ii, err := pickColumn(cols, file, "id", opts.ID)
	if err != nil {
		return nil, err
	}
	fi, err := featureColumns(cols, file, opts.Features)
	if err != nil {
		return nil, err
	}
	li, err := pickColumn(cols, file, "label", opts.Label)
	if err != nil {
		return nil, err
	}
	spi, err := pickColumn(cols, file, "split", opts.Split)
	if err != nil {
		return nil, err
	}
	ti, err := pickColumn(cols, file, "node-type", opts.NodeType)
	if err != nil {
		return nil, err
	}
	mi := [3]int{-1, -1, -1}
	if spi < 0 && opts.Split != "-" {
		for s, names := range maskColumns {
			for _, nm := range names {
				if i := findColumn(cols, nm); i >= 0 && mi[s] < 0 {
					mi[s] = i
				}
			}
		}
	}
	role := map[int]string{}
	var sel []int
	add := func(i int, r string) error {
		if i < 0 {
			return nil
		}
		if prev, ok := role[i]; ok {
			return &TableError{Path: file, Column: cols[i].name, Msg: fmt.Sprintf("used both as the %s and the %s column", prev, r)}
		}
		role[i] = r
		sel = append(sel, i)
		return nil
	}
	for _, x := range []struct {
		i int
		r string
	}{{ii, "ID"}, {li, "label"}, {spi, "split"}, {ti, "node type"}, {mi[0], "train mask"}, {mi[1], "val mask"}, {mi[2], "test mask"}} {
		if err := add(x.i, x.r); err != nil {
			return nil, err
		}
	}
	firstFeat := len(sel)
	for _, i := range fi {
		if err := add(i, "feature"); err != nil {
			return nil, err
		}
	}
	if err := checkReadable(cols, file, sel); err != nil {
		return nil, err
	}
	nf := len(fi)
	listFeat := nf == 1 // one feature column: each cell may hold a list
	for _, i := range fi {
		if cols[i].list && nf > 1 {
			return nil, &UnsupportedError{Path: file, Column: cols[i].name, Msg: "a list column can only be the one feature column"}
		}
	}
	if nf > 1 {
		nt.featDim = int64(nf)
	}
	nt.hasID = ii >= 0
	if li >= 0 {
		nt.labCol = cols[li].name
	}
	if spi >= 0 {
		nt.splCol = cols[spi].name
	}
	for s := range mi {
		if mi[s] >= 0 {
			nt.hasMask = true
			if nt.splCol == "" {
				nt.splCol = cols[mi[s]].name
			}
		}
	}
	types := typeColumn{kind: "node"}
	grow := func(n int64) error {
		nt.rows += n
		if nt.rows > dataset.MaxNodes {
			return &TableError{Path: file, Row: nt.rows, Msg: fmt.Sprintf("more than %d rows (node IDs are int32)", int64(dataset.MaxNodes))}
		}
		if opts.limitNodes > 0 && nt.rows > opts.limitNodes {
			return &TableError{Path: file, Row: nt.rows, Msg: fmt.Sprintf("more rows than the limit %d", opts.limitNodes)}
		}
		if li >= 0 {
			nt.labels = slices.Grow(nt.labels, int(n))[:nt.rows]
		}
		if spi >= 0 {
			nt.split = slices.Grow(nt.split, int(n))[:nt.rows]
		}
		for s := range mi {
			if mi[s] >= 0 {
				nt.masks[s] = slices.Grow(nt.masks[s], int(n))[:nt.rows]
			}
		}
		if nt.featDim > 0 {
			nt.feats = slices.Grow(nt.feats, int(n*nt.featDim))[:nt.rows*nt.featDim]
		}
		return nil
	}
	idRows := int64(0)
	visit := func(row int64, k int, c *cell) error {
		i := sel[k]
		switch {
		case i == ii:
			kk, err := cellKey(c)
			if err != nil {
				return err
			}
			v, dup := nt.ids.add(kk)
			if dup {
				return problem("node ID %s repeats the ID of row %d", keyText(kk), v+1)
			}
			if int64(v) != row {
				return problem("internal: node ID numbered %d at row %d", v, row+1)
			}
			idRows = row + 1
		case i == li:
			return nt.setLabel(row, c)
		case i == spi:
			return nt.setSplit(row, c)
		case i == ti:
			return types.see(row, c)
		case k >= firstFeat:
			return nt.setFeature(row, k-firstFeat, c, listFeat)
		default:
			for s := range mi {
				if i == mi[s] {
					b, ok := cellSmallInt(c)
					if c.kind == cText {
						switch strings.ToLower(string(bytes.TrimSpace(c.b))) {
						case "true":
							b, ok = 1, true
						case "false":
							b, ok = 0, true
						}
					}
					if !ok || b < 0 || b > 1 {
						return problem("want a split mask value (0/1 or true/false), got %s", describe(c))
					}
					nt.masks[s][row] = b == 1
				}
			}
		}
		return nil
	}
	if err := t.scan(sel, grow, visit); err != nil {
		return nil, err
	}
	if types.distinct > 1 {
		return nil, types.refuse(file, cols[ti].name)
	}
	if nt.hasID && idRows != nt.rows {
		return nil, &TableError{Path: file, Column: cols[ii].name, Msg: fmt.Sprintf("has %d IDs for %d rows", idRows, nt.rows)}
	}
	if !nt.hasID {
		nt.ids.identity = int32(nt.rows)
	}
	if nt.featDim < 0 {
		nt.featDim = 0
	}
	if int64(len(nt.feats)) != nt.rows*nt.featDim {
		return nil, &TableError{Path: file, Msg: fmt.Sprintf("features of %d rows read for %d rows", int64(len(nt.feats))/max(nt.featDim, 1), nt.rows)}
	}
	return nt, nil
}

func (nt *nodeTable) setFeature(row int64, j int, c *cell, list bool) error {
	if list {
		var vals []float32
		switch c.kind {
		case cList:
			vals = c.list
		case cText:
			var err error
			if vals, err = parseListCell(c.b); err != nil {
				return err
			}
		default:
			v, err := cellFloat32(c, "feature")
			if err != nil {
				return err
			}
			vals = []float32{v}
		}
		if nt.featDim < 0 {
			nt.featDim = int64(len(vals))
		}
		if int64(len(vals)) != nt.featDim {
			return problem("%d feature values, earlier rows have %d", len(vals), nt.featDim)
		}
		if want := (row + 1) * nt.featDim; int64(len(nt.feats)) < want {
			nt.feats = slices.Grow(nt.feats, int(want)-len(nt.feats))[:want]
		}
		for i, v := range vals {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return problem("feature value %d (%v) is not finite", i, v)
			}
		}
		copy(nt.feats[row*nt.featDim:], vals)
		return nil
	}
	if c.kind == cList {
		return problem("a list where a number is expected (a list column must be the only feature column)")
	}
	v, err := cellFloat32(c, "feature")
	if err != nil {
		return err
	}
	nt.feats[row*nt.featDim+int64(j)] = v
	return nil
}

// parseListCell reads a CSV cell holding a list of numbers: "[1, 2.5]",
// "1 2.5", "1;2.5" or "1,2.5" (a quoted cell).
func parseListCell(b []byte) ([]float32, error) {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && (b[0] == '[' && b[len(b)-1] == ']' || b[0] == '(' && b[len(b)-1] == ')') {
		b = b[1 : len(b)-1]
	}
	var out []float32
	for len(b) > 0 {
		i := 0
		for i < len(b) && isListSep(b[i]) {
			i++
		}
		j := i
		for j < len(b) && !isListSep(b[j]) {
			j++
		}
		if j > i {
			v, ok := parseFloat32(b[i:j])
			if !ok {
				return nil, problem("list element %d: want a finite number, got %s", len(out)+1, quote(b[i:j]))
			}
			out = append(out, v)
		}
		b = b[j:]
	}
	return out, nil
}

func isListSep(c byte) bool { return c == ' ' || c == ',' || c == ';' || c == '\t' }

func (nt *nodeTable) setLabel(row int64, c *cell) error {
	switch c.kind {
	case cNull:
		nt.labels[row] = -1
		return nil
	case cFloat:
		if math.IsNaN(c.f) {
			nt.labels[row] = -1
			return nil
		}
	case cText:
		t := bytes.TrimSpace(c.b)
		if len(t) == 0 || strings.EqualFold(string(t), "nan") {
			nt.labels[row] = -1
			return nil
		}
	}
	v, isInt := cellSmallInt(c)
	if c.kind == cText && !isInt {
		if nt.labMode == 1 {
			return problem("label %s is a name, but earlier labels are integers (use one or the other)", describe(c))
		}
		nt.labMode = 2
		if nt.classes == nil {
			nt.classes = &keySpace{}
		}
		nt.labels[row] = nt.classes.intern(key{s: bytes.TrimSpace(c.b)})
		return nil
	}
	if !isInt {
		return problem("want an integer class or a class name, got %s", describe(c))
	}
	if nt.labMode == 2 {
		return problem("label %d is an integer, but earlier labels are names (use one or the other)", v)
	}
	nt.labMode = 1
	if v < -1 || v >= math.MaxInt32 {
		return problem("label %d out of range [-1, %d)", v, int64(math.MaxInt32))
	}
	nt.labels[row] = int32(v)
	return nil
}

func (nt *nodeTable) setSplit(row int64, c *cell) error {
	s := int8(-2)
	switch c.kind {
	case cNull:
		s = -1
	case cText:
		switch strings.ToLower(string(bytes.TrimSpace(c.b))) {
		case "train", "training", "0":
			s = 0
		case "val", "valid", "validation", "1":
			s = 1
		case "test", "2":
			s = 2
		case "", "none", "unused", "-1", "-":
			s = -1
		}
	default:
		if v, ok := cellSmallInt(c); ok && v >= -1 && v <= 2 {
			s = int8(v)
		}
	}
	if s == -2 {
		return problem("want a split (train/val/test, 0/1/2, or empty/none/-1), got %s", describe(c))
	}
	nt.split[row] = s
	return nil
}

// fill moves the node table's columns into d.
func (nt *nodeTable) fill(d *dataset.Dataset, res *TableImport) error {
	if nt.featDim > 0 {
		d.Features, d.FeatDim = nt.feats, int(nt.featDim)
	}
	if nt.labels != nil {
		if nt.classes != nil {
			perm, ids := nt.classes.sortedPerm()
			for i, l := range nt.labels {
				if l >= 0 {
					nt.labels[i] = perm[l]
				}
			}
			res.ClassNames = ids.Strs
			d.NumClasses = len(perm)
		} else {
			mx := int32(-1)
			for _, l := range nt.labels {
				mx = max(mx, l)
			}
			d.NumClasses = int(mx) + 1
		}
		if d.NumClasses > 0 {
			d.Labels = nt.labels
		}
	}
	if nt.split == nil && !nt.hasMask {
		return nil
	}
	var parts [3][]int32
	for v := range nt.rows {
		if nt.split != nil {
			if s := nt.split[v]; s >= 0 {
				parts[s] = append(parts[s], int32(v))
			}
			continue
		}
		for s := range 3 {
			if nt.masks[s] != nil && nt.masks[s][v] {
				parts[s] = append(parts[s], int32(v))
			}
		}
	}
	if d.Labels == nil {
		if len(parts[0])+len(parts[1])+len(parts[2]) == 0 {
			return nil
		}
		return &TableError{Path: nt.path, Column: nt.splCol, Msg: "a split needs labels (a label column with at least one label): the dataset format keeps splits only with labels"}
	}
	d.Train, d.Val, d.Test = nonNil(parts[0]), nonNil(parts[1]), nonNil(parts[2])
	return nil
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}
