// Package tabletest writes a dataset out as CSV or Parquet tables (an
// edge table and a node table laid out as PyG and GraphBolt users keep
// them), for tests of the table importer and the CLI.
package tabletest

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/strata-gnn/strata/dataset"
)

// Options shape the tables.
type Options struct {
	// ID gives node v's ID as text; nil writes v itself.
	ID func(v int) string
	// ListFeatures writes one list column "feat" instead of F columns
	// feat_0000, feat_0001, ... (zero-padded, so any column order sorts).
	ListFeatures bool
	// SplitCodes writes the split as 0/1/2 (-1 = none) instead of
	// train/val/test (empty = none).
	SplitCodes bool
	// Gzip compresses CSV files (names end in .gz).
	Gzip bool
	// Delim separates CSV fields (0: ',').
	Delim byte
	// HalfEdges writes each undirected edge once (u < v, plus self-loops).
	HalfEdges bool
}

func (o Options) id(v int) string {
	if o.ID != nil {
		return o.ID(v)
	}
	return strconv.Itoa(v)
}

// splitOf returns node v's split: 0 train, 1 val, 2 test, -1 none.
func splitOf(d *dataset.Dataset) []int8 {
	s := make([]int8, d.NumNodes())
	for i := range s {
		s[i] = -1
	}
	for k, ids := range [][]int32{d.Train, d.Val, d.Test} {
		for _, v := range ids {
			s[v] = int8(k)
		}
	}
	return s
}

func featName(j int) string { return fmt.Sprintf("feat_%04d", j) }

// WriteCSV writes dir/edges.csv and dir/nodes.csv (.gz with Gzip) and
// returns their paths.
func WriteCSV(dir string, d *dataset.Dataset, o Options) (edges, nodes string, err error) {
	delim := string(rune(max(o.Delim, ',')))
	if o.Delim != 0 {
		delim = string(o.Delim)
	}
	ext := ".csv"
	if o.Gzip {
		ext += ".gz"
	}
	edges, nodes = filepath.Join(dir, "edges"+ext), filepath.Join(dir, "nodes"+ext)
	g := d.Graph
	err = writeText(edges, o.Gzip, func(w io.Writer) error {
		hdr := []string{"src", "dst"}
		if g.Weights != nil {
			hdr = append(hdr, "weight")
		}
		fmt.Fprintln(w, strings.Join(hdr, delim))
		for u := range int(g.NumRows) {
			for e := g.Indptr[u]; e < g.Indptr[u+1]; e++ {
				v := int(g.Indices[e])
				if o.HalfEdges && v < u {
					continue
				}
				fmt.Fprint(w, o.id(u), delim, o.id(v))
				if g.Weights != nil {
					fmt.Fprint(w, delim, strconv.FormatFloat(float64(g.Weights[e]), 'g', -1, 32))
				}
				fmt.Fprintln(w)
			}
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	sp := splitOf(d)
	err = writeText(nodes, o.Gzip, func(w io.Writer) error {
		hdr := []string{"id"}
		if d.FeatDim > 0 {
			if o.ListFeatures {
				hdr = append(hdr, "feat")
			} else {
				for j := range d.FeatDim {
					hdr = append(hdr, featName(j))
				}
			}
		}
		if d.Labels != nil {
			hdr = append(hdr, "label", "split")
		}
		fmt.Fprintln(w, strings.Join(hdr, delim))
		var b []byte
		for v := range int(d.NumNodes()) {
			b = append(b[:0], o.id(v)...)
			if d.FeatDim > 0 {
				row := d.Features[v*d.FeatDim : (v+1)*d.FeatDim]
				b = append(b, delim...)
				if o.ListFeatures {
					b = append(b, "\"["...)
				}
				for j, x := range row {
					if j > 0 {
						if o.ListFeatures {
							b = append(b, ", "...)
						} else {
							b = append(b, delim...)
						}
					}
					b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
				}
				if o.ListFeatures {
					b = append(b, "]\""...)
				}
			}
			if d.Labels != nil {
				b = append(b, delim...)
				b = strconv.AppendInt(b, int64(d.Labels[v]), 10)
				b = append(b, delim...)
				switch s := sp[v]; {
				case o.SplitCodes:
					b = strconv.AppendInt(b, int64(s), 10)
				case s >= 0:
					b = append(b, [3]string{"train", "val", "test"}[s]...)
				}
			}
			b = append(b, '\n')
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	return edges, nodes, err
}

func writeText(path string, gz bool, body func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(f)
		w = zw
	}
	bw := bufio.NewWriter(w)
	if err := body(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	return f.Close()
}

// WriteParquet writes dir/edges.parquet and dir/nodes.parquet (snappy
// compressed, several row groups) and returns their paths. IDs are int64
// columns without Options.ID, string columns with it.
func WriteParquet(dir string, d *dataset.Dataset, o Options) (edges, nodes string, err error) {
	edges, nodes = filepath.Join(dir, "edges.parquet"), filepath.Join(dir, "nodes.parquet")
	idNode := parquet.Int(64)
	idVal := func(v int) parquet.Value { return parquet.Int64Value(int64(v)) }
	if o.ID != nil {
		idNode = parquet.String()
		idVal = func(v int) parquet.Value { return parquet.ByteArrayValue([]byte(o.ID(v))) }
	}
	g := d.Graph
	eg := parquet.Group{"src": idNode, "dst": idNode}
	if g.Weights != nil {
		eg["weight"] = parquet.Leaf(parquet.FloatType)
	}
	es := parquet.NewSchema("edges", eg)
	col := func(s *parquet.Schema, name string) int {
		for i, p := range s.Columns() {
			if len(p) == 1 && p[0] == name {
				return i
			}
		}
		panic("no column " + name)
	}
	err = writeParquet(edges, es, func(emit func(parquet.Row) error) error {
		si, di, wi := col(es, "src"), col(es, "dst"), -1
		if g.Weights != nil {
			wi = col(es, "weight")
		}
		for u := range int(g.NumRows) {
			for e := g.Indptr[u]; e < g.Indptr[u+1]; e++ {
				v := int(g.Indices[e])
				if o.HalfEdges && v < u {
					continue
				}
				row := make(parquet.Row, len(es.Columns()))
				row[si] = idVal(u).Level(0, 0, si)
				row[di] = idVal(v).Level(0, 0, di)
				if wi >= 0 {
					row[wi] = parquet.FloatValue(g.Weights[e]).Level(0, 0, wi)
				}
				if err := emit(row); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	ng := parquet.Group{"id": idNode}
	if d.FeatDim > 0 {
		if o.ListFeatures {
			ng["feat"] = parquet.List(parquet.Leaf(parquet.FloatType))
		} else {
			for j := range d.FeatDim {
				ng[featName(j)] = parquet.Leaf(parquet.FloatType)
			}
		}
	}
	if d.Labels != nil {
		ng["label"] = parquet.Int(32)
		if o.SplitCodes {
			ng["split"] = parquet.Int(32)
		} else {
			ng["split"] = parquet.Optional(parquet.String())
		}
	}
	ns := parquet.NewSchema("nodes", ng)
	sp := splitOf(d)
	err = writeParquet(nodes, ns, func(emit func(parquet.Row) error) error {
		for v := range int(d.NumNodes()) {
			var row parquet.Row
			// Leaf columns come in schema order (names sorted).
			for ci, p := range ns.Columns() {
				switch name := p[0]; {
				case name == "id":
					row = append(row, idVal(v).Level(0, 0, ci))
				case name == "feat":
					for j, x := range d.Features[v*d.FeatDim : (v+1)*d.FeatDim] {
						rep := 1
						if j == 0 {
							rep = 0
						}
						row = append(row, parquet.FloatValue(x).Level(rep, 1, ci))
					}
				case strings.HasPrefix(name, "feat_"):
					j, _ := strconv.Atoi(strings.TrimPrefix(name, "feat_"))
					row = append(row, parquet.FloatValue(d.Features[v*d.FeatDim+j]).Level(0, 0, ci))
				case name == "label":
					row = append(row, parquet.Int32Value(d.Labels[v]).Level(0, 0, ci))
				case name == "split":
					s := sp[v]
					switch {
					case o.SplitCodes:
						row = append(row, parquet.Int32Value(int32(s)).Level(0, 0, ci))
					case s < 0:
						row = append(row, parquet.NullValue().Level(0, 0, ci))
					default:
						row = append(row, parquet.ByteArrayValue([]byte([3]string{"train", "val", "test"}[s])).Level(0, 1, ci))
					}
				}
			}
			if err := emit(row); err != nil {
				return err
			}
		}
		return nil
	})
	return edges, nodes, err
}

// writeParquet writes rows in row groups of 1000 (so readers cross row
// group boundaries), snappy-compressed.
func writeParquet(path string, s *parquet.Schema, body func(emit func(parquet.Row) error) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := parquet.NewWriter(f, s, parquet.Compression(&parquet.Snappy), parquet.PageBufferSize(16<<10))
	n := 0
	err = body(func(r parquet.Row) error {
		if _, err := w.WriteRows([]parquet.Row{r}); err != nil {
			return err
		}
		if n++; n%1000 == 0 {
			return w.Flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// WriteNPY writes data ([]float32 as <f4 or []int32 as <i4) as a .npy
// array of the given shape.
func WriteNPY(path string, shape []int64, data any) error {
	descr, size := "", 0
	switch x := data.(type) {
	case []float32:
		descr, size = "<f4", len(x)
	case []int32:
		descr, size = "<i4", len(x)
	default:
		return fmt.Errorf("tabletest: WriteNPY: unsupported %T", data)
	}
	dims := make([]string, len(shape))
	n := int64(1)
	for i, d := range shape {
		dims[i] = strconv.FormatInt(d, 10)
		n *= d
	}
	if n != int64(size) {
		return fmt.Errorf("tabletest: WriteNPY: %d values for shape %v", size, shape)
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	for (10+len(hdr)+1)%64 != 0 {
		hdr += " "
	}
	hdr += "\n"
	return writeText(path, false, func(w io.Writer) error {
		head := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
		if _, err := w.Write(append(head, hdr...)); err != nil {
			return err
		}
		return binary.Write(w, binary.LittleEndian, data)
	})
}
