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
//
// --link makes edge-seeded batches (LinkRequest): the edges of --edges
// (a text file of "src dst" lines; none: every stored edge, row by row)
// batched by serve.Plan, negatives (--neg-amount, --neg-exclude) from
// serve.NewLinkNegatives, the endpoints sampled as MiniBatches (serve.LinkBatch);
// each line adds edge_label_index.
//
// --typed TYPE samples a typed dataset (format v2) from seeds of TYPE
// (--split of the target type, or --seeds) with --rel-fanouts (one list per
// relation, in the dataset's order, separated by '/'; else --fanouts for
// every relation) through serve.SampleHeteroFrontier; each line holds
// input_id, batch_size, nodes (per type: n_id, num_sampled_nodes) and
// edges (per relation: src, dst, num_sampled_edges).
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
	"github.com/strata-gnn/strata/link"
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
	linkMode := flag.Bool("link", false, "edge-seeded batches")
	edges := flag.String("edges", "", "with --link: a file of \"src dst\" lines (none: every edge)")
	amount := flag.Float64("neg-amount", 0, "with --link: negatives per positive")
	exclude := flag.Bool("neg-exclude", false, "with --link: exclude known edges from the negatives")
	typed := flag.String("typed", "", "sample a typed dataset from seeds of this node type")
	relFan := flag.String("rel-fanouts", "", "with --typed: fanouts per relation, '/'-separated")
	flag.Parse()
	e := serve.Epoch{BatchSize: *bs, Shuffle: *shuffle, Seed: *seed, Epoch: *epoch, Rank: *rank, World: *world, DropLast: *drop}
	if *typed != "" {
		return runTyped(*dir, *typed, *fan, *relFan, *split, *seedList, *replace, e)
	}
	ds, err := dataset.Open(*dir, dataset.OpenOptions{Quiet: true})
	if err != nil {
		return err
	}
	defer ds.Close()
	fanouts, err := ints(*fan)
	if err != nil {
		return fmt.Errorf("--fanouts: %w", err)
	}
	ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: fanouts, Replace: *replace})
	if err != nil {
		return err
	}
	if *linkMode {
		return runLink(ds, ns, *edges, *amount, *exclude, e)
	}
	seeds, err := seedsOf(ds.Train, ds.Val, ds.Test, ds.NumNodes(), *split, *seedList)
	if err != nil {
		return err
	}
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

// seedsOf returns the seeds of --split or --seeds.
func seedsOf(train, val, test []int32, n int64, split, list string) ([]graph.NodeID, error) {
	var seeds []graph.NodeID
	switch split {
	case "train":
		seeds = train
	case "val":
		seeds = val
	case "test":
		seeds = test
	case "all":
		for v := range n {
			seeds = append(seeds, graph.NodeID(v))
		}
	case "":
		s, err := ints(list)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %w", err)
		}
		for _, v := range s {
			seeds = append(seeds, graph.NodeID(v))
		}
	default:
		return nil, fmt.Errorf("--split %q", split)
	}
	return seeds, nil
}

// runLink prints the link batches of an epoch over the edges of path.
func runLink(ds *dataset.Dataset, ns *sample.NeighborSampler, path string, amount float64, exclude bool, e serve.Epoch) error {
	var src, dst []graph.NodeID
	if path == "" {
		g := ds.Graph
		for u := range g.NumRows {
			for _, v := range g.Indices[g.Indptr[u]:g.Indptr[u+1]] {
				src, dst = append(src, graph.NodeID(u)), append(dst, v)
			}
		}
	} else {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var u, v int32
			if _, err := fmt.Sscan(line, &u, &v); err != nil {
				return fmt.Errorf("%s:%d: %w", path, i+1, err)
			}
			src, dst = append(src, u), append(dst, v)
		}
	}
	neg, err := serve.NewLinkNegatives(ds.Graph, link.Edges{Src: src, Dst: dst}, serve.LinkConfig{Amount: amount, Exclude: exclude, Seed: e.Seed})
	if err != nil {
		return err
	}
	order, err := serve.Plan(len(src), e)
	if err != nil {
		return err
	}
	r := serve.NewRelabeler(ds.NumNodes())
	enc := json.NewEncoder(os.Stdout)
	for i := range serve.NumBatches(len(src), e.BatchSize, e.World, e.DropLast) {
		pos := order[i*e.BatchSize : min((i+1)*e.BatchSize, len(order))]
		var pe link.Edges
		for _, p := range pos {
			pe.Src, pe.Dst = append(pe.Src, src[p]), append(pe.Dst, dst[p])
		}
		key := e.Key(i)
		pb, err := serve.LinkBatch(neg, amount, pe, key, func(seeds []graph.NodeID) (*serve.PyGBatch, error) {
			mb, err := ns.Sample(seeds, key)
			if err != nil {
				return nil, err
			}
			return serve.FromMiniBatch(mb, r, ds.NumNodes())
		})
		if err != nil {
			return err
		}
		if err := enc.Encode(map[string]any{"n_id": pb.NodeIDs, "src": pb.Src, "dst": pb.Dst,
			"num_sampled_nodes": pb.NumSampledNodes, "num_sampled_edges": pb.NumSampledEdges, "input_id": pos,
			"edge_label_index": [][]int32{pb.LabelSrc, pb.LabelDst}}); err != nil {
			return err
		}
	}
	return nil
}

// runTyped prints the typed batches of an epoch.
func runTyped(dir, typ, fan, relFan, split, list string, replace bool, e serve.Epoch) error {
	h, err := dataset.OpenHetero(dir, dataset.OpenOptions{Quiet: true})
	if err != nil {
		return err
	}
	defer h.Close()
	t := h.NodeType(typ)
	if t < 0 {
		return fmt.Errorf("--typed %q: no such node type", typ)
	}
	fanouts := make([][]int, len(h.EdgeTypes))
	var per []string
	if relFan != "" {
		per = strings.Split(relFan, "/")
		if len(per) != len(fanouts) {
			return fmt.Errorf("--rel-fanouts: %d lists for %d relations", len(per), len(fanouts))
		}
	}
	for r := range fanouts {
		f := fan
		if per != nil {
			f = per[r]
		}
		if fanouts[r], err = ints(f); err != nil {
			return fmt.Errorf("fanouts of relation %d: %w", r, err)
		}
	}
	numNodes := make([]int64, len(h.NodeTypes))
	for i, nt := range h.NodeTypes {
		numNodes[i] = nt.NumNodes
	}
	rels := make([]sample.Relation, len(h.EdgeTypes))
	for r, et := range h.EdgeTypes {
		rels[r] = sample.Relation{Src: et.Src, Dst: et.Dst, In: et.In}
	}
	hs, err := sample.NewHeteroSampler(numNodes, rels, sample.HeteroConfig{Fanouts: fanouts, Replace: replace})
	if err != nil {
		return err
	}
	var seeds []graph.NodeID
	if split != "" && split != "all" && t != h.Target {
		return fmt.Errorf("--split %s: the splits are on type %s", split, h.NodeTypes[h.Target].Name)
	}
	if seeds, err = seedsOf(h.Train, h.Val, h.Test, numNodes[t], split, list); err != nil {
		return err
	}
	order, err := serve.Plan(len(seeds), e)
	if err != nil {
		return err
	}
	rls := make([]*serve.Relabeler, len(numNodes))
	for i, n := range numNodes {
		rls[i] = serve.NewRelabeler(n)
	}
	enc := json.NewEncoder(os.Stdout)
	for i := range serve.NumBatches(len(seeds), e.BatchSize, e.World, e.DropLast) {
		pos := order[i*e.BatchSize : min((i+1)*e.BatchSize, len(order))]
		b := make([]graph.NodeID, len(pos))
		for k, p := range pos {
			b[k] = seeds[p]
		}
		hb, err := serve.SampleHeteroFrontier(hs, rls, t, b, e.Key(i))
		if err != nil {
			return err
		}
		var nodes, edges []map[string]any
		for ty := range numNodes {
			nodes = append(nodes, map[string]any{"n_id": nonNil(hb.NodeIDs[ty]), "num_sampled_nodes": hb.NumSampledNodes[ty]})
		}
		for r := range rels {
			edges = append(edges, map[string]any{"src": nonNil(hb.Src[r]), "dst": nonNil(hb.Dst[r]), "num_sampled_edges": hb.NumSampledEdges[r]})
		}
		if err := enc.Encode(map[string]any{"input_id": pos, "batch_size": hb.BatchSize, "nodes": nodes, "edges": edges}); err != nil {
			return err
		}
	}
	return nil
}

// nonNil makes an empty list print as [] rather than null.
func nonNil(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}
