package importer

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/dataset"
)

// LoadOGBHetero reads an OGB heterogeneous node-property dataset in its
// raw CSV layout, as ogbn-mag ships it:
//
//	raw/num-node-dict.csv.gz       a header of node types, then one row of counts
//	raw/triplet-type-list.csv.gz   one "src,rel,dst" relation per line
//	raw/relations/<src>___<rel>___<dst>/edge.csv.gz        "src,dst" per line (IDs local to each type)
//	raw/relations/<src>___<rel>___<dst>/num-edge-list.csv.gz  the relation's edge count
//	raw/node-feat/<type>/node-feat.csv.gz     comma-separated floats per node (optional per type)
//	raw/nodetype-has-label.csv.gz  a header of node types, then True/False (optional)
//	raw/node-label/<type>/node-label.csv.gz   one label per line (one labeled type: the target)
//	split/<name>/<type>/{train,valid,test}.csv.gz  the target's node IDs
//
// Other files (edge_reltype, node_year, nodetype-has-split) are ignored.
// Files may be plain or .gz, and the raw/ level may be absent. Every count
// the layout states is checked against what is read; every ID against its
// type's count. Node types and relations are sorted, as OGB sorts them.
func LoadOGBHetero(dir string, opts Options) (*dataset.Hetero, error) {
	raw := filepath.Join(dir, "raw")
	if p, err := findFile(raw, "num-node-dict.csv"); err != nil {
		return nil, err
	} else if p == "" {
		raw = dir
	}
	find := func(parts ...string) (string, error) {
		return findFile(filepath.Join(append([]string{raw}, parts[:len(parts)-1]...)...), parts[len(parts)-1])
	}
	npath, err := find("num-node-dict.csv")
	if err != nil {
		return nil, err
	}
	if npath == "" {
		return nil, fmt.Errorf("importer: %s: no num-node-dict.csv(.gz) in %s or its raw/ folder", dir, dir)
	}
	names, counts, err := readHeaderRow(npath, opts.Quiet)
	if err != nil {
		return nil, err
	}
	var nodes []*typedNode
	byName := map[string]*typedNode{}
	for i, name := range names {
		if msg := dataset.CheckTypeName(name); msg != "" {
			return nil, colErr(npath, 1, int64(i)+1, "node type: %s", msg)
		}
		if byName[name] != nil {
			return nil, colErr(npath, 1, int64(i)+1, "node type %q listed twice", name)
		}
		n, ok := parseInt(counts[i])
		if !ok || n < 0 || n > dataset.MaxNodes {
			return nil, colErr(npath, 2, int64(i)+1, "node type %q: bad count %s (want 0..%d)", name, quote(counts[i]), int64(dataset.MaxNodes))
		}
		if opts.limitNodes > 0 && n > opts.limitNodes {
			return nil, colErr(npath, 2, int64(i)+1, "node count %d exceeds the limit %d", n, opts.limitNodes)
		}
		nt := &typedNode{name: name, n: n, vouched: true}
		byName[name] = nt
		nodes = append(nodes, nt)
	}
	tpath, err := find("triplet-type-list.csv")
	if err != nil {
		return nil, err
	}
	if tpath == "" {
		return nil, fmt.Errorf("importer: %s: no triplet-type-list.csv(.gz)", raw)
	}
	triplets, err := readTriplets(tpath, byName, opts.Quiet)
	if err != nil {
		return nil, err
	}
	var rels []*typedRel
	for _, tr := range triplets {
		folder := tr[0] + dataset.RelSep + tr[1] + dataset.RelSep + tr[2]
		epath, err := find("relations", folder, "edge.csv")
		if err != nil {
			return nil, err
		}
		if epath == "" {
			return nil, fmt.Errorf("importer: %s: no edge.csv(.gz)", filepath.Join(raw, "relations", folder))
		}
		ns, nd := byName[tr[0]].n, byName[tr[2]].n
		src, dst, _, err := readOGBEdges(epath, -1, opts.Quiet) // IDs checked per side below
		if err != nil {
			return nil, err
		}
		for i := range src {
			switch {
			case int64(src[i]) >= ns:
				return nil, colErr(epath, int64(i)+1, 1, "field 1: %s ID %d out of range [0, %d)", tr[0], src[i], ns)
			case int64(dst[i]) >= nd:
				return nil, lineErr(epath, int64(i)+1, "field 2: %s ID %d out of range [0, %d)", tr[2], dst[i], nd)
			}
		}
		if cpath, err := find("relations", folder, "num-edge-list.csv"); err != nil {
			return nil, err
		} else if cpath != "" {
			want, err := readCount(cpath, "edge", math.MaxInt64/16, opts.Quiet)
			if err != nil {
				return nil, err
			}
			if int64(len(src)) != want {
				return nil, fileErr(epath, "has %d edges, %s says %d", len(src), shortName(cpath), want)
			}
		}
		rels = append(rels, &typedRel{src: tr[0], rel: tr[1], dst: tr[2], path: epath, s: src, d: dst})
	}
	for _, nt := range nodes {
		fpath, err := find("node-feat", nt.name, "node-feat.csv")
		if err != nil {
			return nil, err
		}
		if fpath != "" {
			feats, dim, rows, err := readOGBFeatures(fpath, opts.Quiet)
			if err != nil {
				return nil, err
			}
			if rows != nt.n {
				return nil, fileErr(fpath, "has %d rows, num-node-dict says %d %s nodes", rows, nt.n, nt.name)
			}
			nt.feat, nt.dim = feats, dim
		}
	}
	labeled, err := ogbLabeledTypes(raw, nodes, opts.Quiet)
	if err != nil {
		return nil, err
	}
	for _, nt := range labeled {
		lpath, err := find("node-label", nt.name, "node-label.csv")
		if err != nil {
			return nil, err
		}
		if lpath == "" {
			return nil, fmt.Errorf("importer: %s: node type %q is labeled but has no node-label.csv(.gz)", filepath.Join(raw, "node-label", nt.name), nt.name)
		}
		labels, classes, err := readOGBLabels(lpath, opts.Quiet)
		if err != nil {
			return nil, err
		}
		if int64(len(labels)) != nt.n {
			return nil, fileErr(lpath, "has %d rows, want one per %s node (%d)", len(labels), nt.name, nt.n)
		}
		if classes > 0 {
			nt.labels, nt.classes = labels, classes
		}
	}
	return assemble(defaultName(dir, opts), nodes, rels, opts, func(target *typedNode, n int64) ([3][]int32, error) {
		var out [3][]int32
		sdir, err := ogbSplitDir(dir, opts.OGBSplit)
		if err != nil || sdir == "" {
			return out, err
		}
		for i, file := range []string{"train.csv", "valid.csv", "test.csv"} {
			p, err := findFile(filepath.Join(sdir, target.name), file)
			if err != nil {
				return out, err
			}
			if p == "" {
				return out, fmt.Errorf("importer: %s: no %s(.gz)", filepath.Join(sdir, target.name), file)
			}
			if out[i], err = readIDList(p, n, opts.Quiet); err != nil {
				return out, err
			}
		}
		return out, nil
	})
}

// ogbLabeledTypes returns the node types with labels: those
// nodetype-has-label marks True when the file exists, else those with a
// node-label folder.
func ogbLabeledTypes(raw string, nodes []*typedNode, quiet bool) ([]*typedNode, error) {
	hpath, err := findFile(raw, "nodetype-has-label.csv")
	if err != nil {
		return nil, err
	}
	var out []*typedNode
	if hpath == "" {
		for _, nt := range nodes {
			p, err := findFile(filepath.Join(raw, "node-label", nt.name), "node-label.csv")
			if err != nil {
				return nil, err
			}
			if p != "" {
				out = append(out, nt)
			}
		}
		return out, nil
	}
	names, vals, err := readHeaderRow(hpath, quiet)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		var nt *typedNode
		for _, x := range nodes {
			if x.name == name {
				nt = x
			}
		}
		if nt == nil {
			return nil, colErr(hpath, 1, int64(i)+1, "%q is not a node type of num-node-dict", truncate(name, 32))
		}
		switch strings.ToLower(string(vals[i])) {
		case "true", "1":
			out = append(out, nt)
		case "false", "0":
		default:
			return nil, colErr(hpath, 2, int64(i)+1, "want True or False, got %s", quote(vals[i]))
		}
	}
	return out, nil
}

// readHeaderRow reads a pandas-written one-row table: a header line of
// names and one line of as many values (blank lines ignored; a second
// data row, i.e. several graphs, is refused).
func readHeaderRow(path string, quiet bool) (names []string, vals [][]byte, err error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, nil, err
	}
	defer in.Close()
	lr := newLineReader(in)
	var rows [][][]byte
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if len(rows) == 2 {
			return nil, nil, lineErr(path, lr.line, "several graphs are not supported (a second row of values)")
		}
		var fields [][]byte
		for _, f := range bytes.Split(b, []byte{','}) {
			f = bytes.TrimSpace(f)
			if len(f) >= 2 && f[0] == '"' && f[len(f)-1] == '"' {
				f = f[1 : len(f)-1]
			}
			fields = append(fields, append([]byte(nil), f...))
		}
		if len(rows) == 1 && len(fields) != len(rows[0]) {
			return nil, nil, lineErr(path, lr.line, "%d values for %d names in the header", len(fields), len(rows[0]))
		}
		if len(fields) > dataset.MaxNodeTypes {
			return nil, nil, lineErr(path, lr.line, "%d columns, more than %d node types", len(fields), dataset.MaxNodeTypes)
		}
		rows = append(rows, fields)
	}
	if len(rows) != 2 {
		return nil, nil, fileErr(path, "want a header line and one line of values, got %d lines", len(rows))
	}
	for _, f := range rows[0] {
		names = append(names, string(f))
	}
	return names, rows[1], nil
}

// readTriplets reads "src,rel,dst" lines naming known node types.
func readTriplets(path string, types map[string]*typedNode, quiet bool) ([][3]string, error) {
	in, err := openInput(path, quiet)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	lr := newLineReader(in)
	var out [][3]string
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		f := bytes.Split(b, []byte{','})
		if len(f) != 3 {
			return nil, lineErr(path, lr.line, "want \"src,rel,dst\", got %s", quote(b))
		}
		var tr [3]string
		col := int64(1)
		for i := range f {
			tr[i] = string(bytes.TrimSpace(f[i]))
			if msg := dataset.CheckTypeName(tr[i]); msg != "" {
				return nil, colErr(path, lr.line, col, "%s", msg)
			}
			if i != 1 && types[tr[i]] == nil {
				return nil, colErr(path, lr.line, col, "%q is not a node type of num-node-dict", tr[i])
			}
			col += int64(len(f[i])) + 1
		}
		if len(out) >= dataset.MaxEdgeTypes {
			return nil, lineErr(path, lr.line, "more than %d relations", dataset.MaxEdgeTypes)
		}
		out = append(out, tr)
	}
	if len(out) == 0 {
		return nil, fileErr(path, "no relations")
	}
	return out, nil
}
