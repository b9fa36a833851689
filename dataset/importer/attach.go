package importer

import (
	"encoding/csv"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/atomicfile"
)

// AttachOptions names .npy files to attach to any imported dataset, in
// node-number order (a node table's row order, or the order node_ids.csv
// lists). Each replaces what the dataset had.
type AttachOptions struct {
	Features string // float [N, F]
	Labels   string // int [N] or [N, 1] (-1 = unlabeled), or float with NaN = unlabeled
	// Train, Val, Test: node IDs (int [k]) or boolean masks ([N]).
	Train, Val, Test string
}

// Empty reports whether nothing is to be attached.
func (a AttachOptions) Empty() bool { return a == AttachOptions{} }

// Attach reads the arrays a names and puts them into d (which must hold
// its arrays on the heap, not a mapping), then validates d. Sizes are
// checked against d's node count before anything is allocated.
func Attach(d *dataset.Dataset, a AttachOptions) error {
	if d.Mapped() {
		return fmt.Errorf("importer: Attach needs a dataset on the heap (this one is memory-mapped)")
	}
	n := d.NumNodes()
	if a.Features != "" {
		nf, err := openNPY(a.Features)
		if err != nil {
			return err
		}
		sh := nf.h.Shape
		if len(sh) != 2 || sh[0] != n || sh[1] > 1<<24 {
			nf.Close()
			return offErr(a.Features, 0, "features must have shape [%d, F] (one row per node, F <= %d), got %v", n, 1<<24, sh)
		}
		feats, err := nf.readFloat32s()
		nf.Close()
		if err != nil {
			return err
		}
		d.Features, d.FeatDim = feats, int(sh[1])
		if d.FeatDim == 0 {
			d.Features = nil
		}
	}
	if a.Labels != "" {
		labels, classes, err := readNPYLabels(a.Labels)
		if err != nil {
			return err
		}
		if int64(len(labels)) != n {
			return offErr(a.Labels, 0, "%d labels for %d nodes", len(labels), n)
		}
		d.Labels, d.NumClasses = labels, classes
		if classes == 0 {
			d.Labels = nil
		}
	}
	for _, s := range []struct {
		path string
		dst  *[]int32
	}{{a.Train, &d.Train}, {a.Val, &d.Val}, {a.Test, &d.Test}} {
		if s.path == "" {
			continue
		}
		ids, err := readNPYSplit(s.path, n)
		if err != nil {
			return err
		}
		*s.dst = nonNil(ids)
	}
	if d.Labels == nil && (d.Train != nil || d.Val != nil || d.Test != nil) {
		return fmt.Errorf("importer: splits need labels (attach them with a labels array or a label column)")
	}
	if err := dataset.Validate(d); err != nil {
		return fmt.Errorf("importer: after attaching: %w", err)
	}
	return nil
}

// Side files an import may leave in the dataset directory (Open ignores
// them).
const (
	NodeIDsFile    = "node_ids.csv"    // "node,id": the original ID of every node
	ClassNamesFile = "class_names.csv" // "class,name": the name of every class
)

// WriteNodeIDs writes ids as dir/node_ids.csv ("node,id" header, one row
// per node in node order), atomically.
func WriteNodeIDs(dir string, ids *NodeIDs) error {
	return writePairs(filepath.Join(dir, NodeIDsFile), "node", "id", ids.Len(), ids.String)
}

// WriteClassNames writes dir/class_names.csv ("class,name").
func WriteClassNames(dir string, names []string) error {
	return writePairs(filepath.Join(dir, ClassNamesFile), "class", "name", len(names), func(i int) string { return names[i] })
}

func writePairs(path, a, b string, n int, val func(int) string) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		cw := csv.NewWriter(w)
		if err := cw.Write([]string{a, b}); err != nil {
			return err
		}
		rec := make([]string, 2)
		for i := range n {
			rec[0], rec[1] = strconv.Itoa(i), val(i)
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	}, atomicfile.Options{})
}

// ReadEdgeIndexNPY reads a .npy array of edges, int32 or int64 of shape
// [2, E] (row 0 the sources; [2, 2] is read this way) or [E, 2], every ID
// in [0, n). Sizes are checked against the file before allocating.
func ReadEdgeIndexNPY(path string, n int64) (src, dst []int32, err error) {
	return readNPYEdges(path, n)
}
