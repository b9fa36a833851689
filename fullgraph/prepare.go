package fullgraph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/train"
)

// PartitionStats describes the row blocks of a run.
type PartitionStats struct {
	Method string  `json:"method"`
	Parts  int     `json:"parts"`
	Sizes  []int64 `json:"sizes"`
	// Edges counts the entries of the aggregation matrix (self-loops
	// included for GCN and GAT); RemoteEdges those whose source lies in another
	// block, RemoteFraction their share.
	Edges          int64   `json:"edges"`
	RemoteEdges    int64   `json:"remote_edges"`
	RemoteFraction float64 `json:"remote_fraction"`
	Seconds        float64 `json:"seconds"`
}

// prepared is a dataset ready for the devices: renumbered so that every
// block is a contiguous ID range, features normalized.
type prepared struct {
	ds      *dataset.Dataset
	in      *graph.CSR
	feats   *train.Features
	offsets []int64
	part    PartitionStats
	// oldToNew maps the caller's node IDs to ds's (nil: unchanged).
	oldToNew []int32
}

// DataError reports a dataset that cannot be trained on.
type DataError struct{ Msg string }

func (e *DataError) Error() string { return "fullgraph: dataset: " + e.Msg }

// checkDataset is train.CheckDataset, as a *DataError.
func checkDataset(ds *dataset.Dataset) error {
	var de *train.DataError
	if err := train.CheckDataset(ds); errors.As(err, &de) {
		return &DataError{Msg: de.Msg}
	} else if err != nil {
		return err
	}
	return nil
}

// PartitionDataset splits ds into p row blocks with the given method
// (PartitionMultilevel, PartitionMETIS or PartitionRange) and returns the
// dataset renumbered so that block b is the ID range [offsets[b],
// offsets[b+1]), and the offsets. With p == 1 or PartitionRange ds itself
// is returned. A run of the engine on p devices does exactly this, so a
// single-device run on the returned dataset is its exact reference.
func PartitionDataset(ctx context.Context, ds *dataset.Dataset, p int, method string, seed uint64) (*dataset.Dataset, []int64, error) {
	pds, off, _, err := partitionDataset(ctx, ds, p, method, seed)
	return pds, off, err
}

// partitionDataset is PartitionDataset, also returning the renumbering
// (old ID to new; nil when ds is returned as it is).
func partitionDataset(ctx context.Context, ds *dataset.Dataset, p int, method string, seed uint64) (*dataset.Dataset, []int64, []int32, error) {
	if ds == nil || ds.Graph == nil {
		return nil, nil, nil, &DataError{Msg: "no graph"}
	}
	n := int(ds.NumNodes())
	if p < 1 || p > maxDevices || p > n {
		return nil, nil, nil, cfgErr("devices", "%d devices for %d nodes (want 1..%d, at most one per node)", p, n, maxDevices)
	}
	if p == 1 || method == PartitionRange {
		off, err := RangeOffsets(n, p)
		return ds, off, nil, err
	}
	var m partition.Method
	switch method {
	case PartitionMultilevel:
		m = partition.Multilevel
	case PartitionMETIS:
		m = partition.METIS
	default:
		return nil, nil, nil, cfgErr("partition", "unknown method %q", method)
	}
	res, err := partition.Partition(ctx, ds.Graph, partition.Options{K: p, Seed: seed, Method: m})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fullgraph: partition: %w", err)
	}
	ren, err := partition.Renumber(res.Parts, p)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fullgraph: partition: %w", err)
	}
	pds, err := partition.PermuteDataset(ds, ren.OldToNew)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fullgraph: partition: %w", err)
	}
	return pds, ren.Book.Offsets(), ren.OldToNew, nil
}

// ApplyPartitionFile renumbers ds by a partition file written by
// 'strata partition' (partition.FileName) for the same dataset (checked
// with partition.Saved.CheckDataset: a file for another dataset of the
// same size is refused, naming both fingerprints), and
// returns the renumbered dataset and its block offsets, for
// Options.Offsets: a partition computed once (or elsewhere) serves many
// runs.
func ApplyPartitionFile(ds *dataset.Dataset, path string) (*dataset.Dataset, []int64, error) {
	if ds == nil || ds.Graph == nil {
		return nil, nil, &DataError{Msg: "no graph"}
	}
	saved, err := partition.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("fullgraph: partition file: %w", err)
	}
	// The file must partition this very dataset: same node count and,
	// for files that record it, the same fingerprint.
	if _, err := saved.CheckDataset(path, ds); err != nil {
		var me *partition.MismatchError
		if errors.As(err, &me) {
			return nil, nil, &DataError{Msg: fmt.Sprintf("partition file %s: %s", path, me.Msg)}
		}
		return nil, nil, err
	}
	pds, err := partition.PermuteDataset(ds, saved.OldToNew)
	if err != nil {
		return nil, nil, fmt.Errorf("fullgraph: partition file: %w", err)
	}
	return pds, saved.Book.Offsets(), nil
}

// prepare partitions and renumbers ds for p devices (unless offsets
// gives its blocks already) and normalizes its features.
func prepare(ctx context.Context, ds *dataset.Dataset, cfg *Config, p int, offsets []int64) (*prepared, error) {
	pr := &prepared{}
	method := cfg.Partition
	if p == 1 {
		method = PartitionRange
	}
	var err error
	if offsets != nil {
		method = "given"
		pr.ds, pr.offsets = ds, append([]int64(nil), offsets...)
	} else if pr.ds, pr.offsets, pr.oldToNew, err = partitionDataset(ctx, ds, p, method, cfg.PartitionSeed); err != nil {
		return nil, err
	}
	if pr.in, err = pr.ds.InAdjacency(); err != nil {
		return nil, &DataError{Msg: err.Error()}
	}
	if cfg.Order == OrderDegree {
		perm := degreeOrder(pr.in, pr.offsets)
		if pr.ds, err = partition.PermuteDataset(pr.ds, perm); err != nil {
			return nil, fmt.Errorf("fullgraph: node order: %w", err)
		}
		if pr.oldToNew == nil {
			pr.oldToNew = perm
		} else {
			for i, v := range pr.oldToNew {
				pr.oldToNew[i] = perm[v]
			}
		}
		if pr.in, err = pr.ds.InAdjacency(); err != nil {
			return nil, &DataError{Msg: err.Error()}
		}
		method += ", nodes by degree"
	}
	if pr.feats, err = train.NewFeatures(pr.ds.Features, int(pr.ds.NumNodes()), pr.ds.FeatDim, cfg.RowNorm); err != nil {
		return nil, &DataError{Msg: err.Error()}
	}
	pr.feats.Round(cfg.Prec()) // bf16: the values a bfloat16 table holds
	pr.part = PartitionStats{Method: method, Parts: p}
	for b := 0; b < p; b++ {
		pr.part.Sizes = append(pr.part.Sizes, pr.offsets[b+1]-pr.offsets[b])
	}
	return pr, nil
}

// degreeOrder returns the renumbering (old ID to new) that sorts the
// nodes of every block [offsets[b], offsets[b+1]) by descending in-degree,
// ties by ID, keeping the blocks.
func degreeOrder(in *graph.CSR, offsets []int64) []int32 {
	n := int(in.NumRows)
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	deg := func(v int32) int64 { return in.Indptr[v+1] - in.Indptr[v] }
	for b := 0; b+1 < len(offsets); b++ {
		slices.SortStableFunc(ids[offsets[b]:offsets[b+1]], func(x, y int32) int { return cmp.Compare(deg(y), deg(x)) })
	}
	oldToNew := make([]int32, n)
	for nw, old := range ids {
		oldToNew[old] = int32(nw)
	}
	return oldToNew
}
