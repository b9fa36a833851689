// Command pygref prints the batches `strata serve` must send for one
// SampleRequest, computed without the server: the seeds of serve.Plan,
// sampled as message-flow-graph MiniBatches by sample.NeighborSampler
// (what `strata train` samples) and converted by serve.FromMiniBatch
// (the server itself samples with serve.SampleFrontier). The Python
// tests (python/tests) compare what strata_pyg yields with it.
//
//	pygref --dataset DIR --fanouts 5,3 --batch-size 64 [--split train | --seeds 4,8,15] \
//	    [--shuffle --seed S --epoch E --rank R --world W --drop-last --replace]
//
// One JSON object per batch and line: n_id, src, dst, num_sampled_nodes,
// num_sampled_edges, input_id.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve"
)

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pygref:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dataset", "", "Strata dataset directory")
	fan := flag.String("fanouts", "", "fanouts, the seeds' hop first")
	bs := flag.Int("batch-size", 1, "seeds per batch")
	split := flag.String("split", "", "train, val, test or all")
	seedList := flag.String("seeds", "", "comma-separated seed nodes (instead of --split)")
	shuffle := flag.Bool("shuffle", false, "shuffle the seeds")
	seed := flag.Uint64("seed", 0, "shuffle and sampling seed")
	epoch := flag.Int("epoch", 0, "epoch")
	rank := flag.Int("rank", 0, "rank")
	world := flag.Int("world", 1, "world size")
	drop := flag.Bool("drop-last", false, "drop the last short batch")
	replace := flag.Bool("replace", false, "sample with replacement")
	flag.Parse()
	ds, err := dataset.Open(*dir, dataset.OpenOptions{Quiet: true})
	if err != nil {
		return err
	}
	defer ds.Close()
	fanouts, err := ints(*fan)
	if err != nil {
		return fmt.Errorf("--fanouts: %w", err)
	}
	var seeds []graph.NodeID
	switch *split {
	case "train":
		seeds = ds.Train
	case "val":
		seeds = ds.Val
	case "test":
		seeds = ds.Test
	case "all":
		for v := range ds.NumNodes() {
			seeds = append(seeds, graph.NodeID(v))
		}
	case "":
		s, err := ints(*seedList)
		if err != nil {
			return fmt.Errorf("--seeds: %w", err)
		}
		for _, v := range s {
			seeds = append(seeds, graph.NodeID(v))
		}
	default:
		return fmt.Errorf("--split %q", *split)
	}
	ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: fanouts, Replace: *replace})
	if err != nil {
		return err
	}
	e := serve.Epoch{BatchSize: *bs, Shuffle: *shuffle, Seed: *seed, Epoch: *epoch, Rank: *rank, World: *world, DropLast: *drop}
	order, err := serve.Plan(len(seeds), e)
	if err != nil {
		return err
	}
	r := serve.NewRelabeler(ds.NumNodes())
	enc := json.NewEncoder(os.Stdout)
	for i := range serve.NumBatches(len(seeds), *bs, *world, *drop) {
		pos := order[i**bs : min((i+1)**bs, len(order))]
		b := make([]graph.NodeID, len(pos))
		for k, p := range pos {
			b[k] = seeds[p]
		}
		mb, err := ns.Sample(b, e.Key(i))
		if err != nil {
			return err
		}
		pb, err := serve.FromMiniBatch(mb, r, ds.NumNodes())
		if err != nil {
			return err
		}
		if err := enc.Encode(map[string]any{"n_id": pb.NodeIDs, "src": pb.Src, "dst": pb.Dst,
			"num_sampled_nodes": pb.NumSampledNodes, "num_sampled_edges": pb.NumSampledEdges, "input_id": pos}); err != nil {
			return err
		}
	}
	return nil
}
