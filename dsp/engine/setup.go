package engine

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// RunError reports a failure with what the run was doing. When a training
// run fails, Stalled lists the stages that had been working (not waiting
// for a queue, a turn or a collective) for half the wait timeout or more
// at the first failure: the likely culprits; States lists what every
// unfinished stage was doing.
type RunError struct {
	Op      string
	Err     error
	Stalled []string
	States  []string
	// Hint, when set, names a known cause and what to do instead.
	Hint string
}

func (e *RunError) Error() string {
	msg := "dsp: " + e.Op + ": " + e.Err.Error()
	if len(e.Stalled) > 0 {
		msg += "; stalled: " + strings.Join(e.Stalled, "; ")
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// stallHint names the known bf16 stall (docs/training.md#precision) when
// a stalled run computed in bf16 on several GPUs of this process: their
// trainers share one cuBLAS, whose products can wait for each other's
// collectives.
func stallHint(p backend.Precision, devices []string, stalled []string) string {
	gpus := 0
	for _, d := range devices {
		if strings.HasPrefix(d, "cuda:") {
			gpus++
		}
	}
	if p != backend.BF16 || gpus < 2 || len(stalled) == 0 {
		return ""
	}
	return "bf16 on several GPUs of one process can stall inside cuBLAS (a known issue, docs/training.md#precision): " +
		"train in fp32, or run a process per GPU (strata launch -n " + fmt.Sprint(gpus) + " -- sh -c 'exec strata train ... --devices cuda:$LOCAL_RANK')"
}
func (e *RunError) Unwrap() error { return e.Err }

// partitioned is the dataset as the devices see it: renumbered so that
// device p owns the node IDs of book range p.
type partitioned struct {
	ds      *dataset.Dataset
	book    *book.Book
	method  string // "none", "range", "multilevel" or "metis"
	edgeCut int64  // undirected edges between patches (multilevel), -1 if not computed
	// newToOld is the original ID of every new ID, oldToNew its inverse
	// (nil: not renumbered).
	newToOld, oldToNew []int32
}

// partitionData splits ds into cfg.Devices patches (cfg is normalized),
// saying on log (when not nil) that a partitioner runs and what it cut.
func partitionData(ctx context.Context, ds *dataset.Dataset, cfg *Config, log io.Writer) (*partitioned, error) {
	k := cfg.Devices
	n := ds.NumNodes()
	if k == 1 || cfg.Partition == Range {
		b, err := book.Even(n, k)
		if err != nil {
			return nil, &RunError{Op: "partition", Err: err}
		}
		m := Range
		if k == 1 {
			m = "none"
		}
		return &partitioned{ds: ds, book: b, method: m, edgeCut: -1}, nil
	}
	s, err := partition.Symmetrize(ds.Graph)
	if err != nil {
		return nil, &RunError{Op: "partition", Err: err}
	}
	// DSP balances edges and training nodes (balance_edges, balance_train).
	w, err := partition.NodeWeights(s, ds.Train, partition.ConstraintEdges, partition.ConstraintTrain)
	if err != nil {
		return nil, &RunError{Op: "partition", Err: err}
	}
	method := partition.Multilevel
	if cfg.Partition == METIS {
		method = partition.METIS
	}
	// On a large graph this takes a while (a minute for the products
	// shape on 2 cores): say so.
	start := time.Now()
	if log != nil {
		fmt.Fprintf(log, "partitioning %d nodes into %d patches (%s; --partition range skips it)\n", n, k, method)
	}
	res, err := partition.PartitionSymmetric(ctx, s, partition.Options{K: k, Seed: cfg.Train.Seed, Method: method, Weights: w})
	if err != nil {
		return nil, &RunError{Op: "partition", Err: err}
	}
	if log != nil {
		fmt.Fprintf(log, "partitioned in %.1fs: %d of %d undirected edges cut\n", time.Since(start).Seconds(), res.EdgeCut, s.NumEdges()/2)
	}
	ren, err := partition.Renumber(res.Parts, k)
	if err != nil {
		return nil, &RunError{Op: "renumber", Err: err}
	}
	pds, err := ren.Apply(ds)
	if err != nil {
		return nil, &RunError{Op: "renumber", Err: err}
	}
	return &partitioned{ds: pds, book: ren.Book, method: cfg.Partition, edgeCut: res.EdgeCut, newToOld: ren.NewToOld, oldToNew: ren.OldToNew}, nil
}

// cacheLayout describes a plan's layout for Info.CacheLayout.
func cacheLayout(p *cache.Plan) string {
	if p.Policy() == cache.Replicate {
		return fmt.Sprintf("%s/%d", p.Policy(), p.GroupSize())
	}
	return string(p.Policy())
}

// checkReplicas verifies that the k devices of c end with the same
// parameters, bit for bit: each hashes its parameters on b and all-gathers
// the hashes over c. Every device must call it.
func checkReplicas(ctx context.Context, b backend.Backend, params []*nn.Param, c comm.Comm, k int) error {
	h, err := paramsHash(b, params)
	if err != nil {
		return err
	}
	all := make([]int64, k)
	if err := c.AllGather(ctx, cpu.WrapI64(all), cpu.WrapI64([]int64{int64(h)})); err != nil {
		return err
	}
	for r, x := range all {
		if x != all[0] {
			return fmt.Errorf("device %d's parameters differ from device 0's", r)
		}
	}
	return nil
}

// paramsHash hashes the parameters' values on b (world.ParamsHash).
func paramsHash(b backend.Backend, params []*nn.Param) (uint64, error) {
	vals := make([][]float32, len(params))
	for i, p := range params {
		vals[i] = make([]float32, p.Len())
		if err := b.Download(vals[i], p.Value); err != nil {
			return 0, err
		}
	}
	return world.ParamsHash(vals), nil
}
