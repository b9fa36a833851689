package main

import (
	"fmt"
	"io"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/sysmem"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// memoryBudget tells what the process may still allocate (tests replace
// it).
var memoryBudget = sysmem.Available

// shapeOf is what the memory estimates need of ds.
func shapeOf(ds *dataset.Dataset) train.Shape {
	return train.Shape{Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), FeatDim: int64(ds.FeatDim),
		Classes: int64(ds.NumClasses), TrainNodes: int64(len(ds.Train)), EvalNodes: int64(len(ds.Train) + len(ds.Val) + len(ds.Test)),
		EvalEdges: evalEdges(ds)}
}

// evalEdges sums the in-degrees of the split nodes: of an undirected
// dataset, whose stored rows are the in-adjacency's; 0 (unknown) for a
// directed one.
func evalEdges(ds *dataset.Dataset) int64 {
	g := ds.Graph
	if ds.Directed || g == nil {
		return 0
	}
	var sum int64
	for _, split := range [][]int32{ds.Train, ds.Val, ds.Test} {
		for _, v := range split {
			if v >= 0 && int64(v) < g.NumRows {
				sum += g.Degree(v)
			}
		}
	}
	return sum
}

// onHost reports whether every back end keeps its memory in host memory
// (CPU devices, virtual or not).
func onHost(bs []backend.Backend) bool {
	for _, b := range bs {
		if deviceSpecOf(b) != "cpu" {
			return false
		}
	}
	return true
}

// checkMemory refuses a run whose estimate does not fit in the memory the
// machine has left (MemAvailable, or the cgroup limit), naming the flag
// that sizes the largest part: --devices LIST when the per-device parts
// dominate (devices is the list, "" for one device). log, when not nil,
// gets one line with the estimate. Where the budget cannot be read the run
// goes ahead.
func checkMemory(est train.MemoryEstimate, devices string, log io.Writer) error {
	need := est.Total()
	b, ok := memoryBudget()
	if !ok || need <= float64(b.Bytes) {
		if log != nil {
			avail := "memory available unknown"
			if ok {
				avail = b.String()
			}
			fmt.Fprintf(log, "memory: about %s besides the dataset (%s); %s\n", sysmem.Format(int64(min(need, 1<<62))), est.String(), avail)
		}
		return nil
	}
	big := est.Largest()
	flag := big.Flag
	switch {
	case big.Count > 1 && devices != "":
		flag = "--devices " + devices
	case flag == "":
		flag = "--dataset"
	}
	return usageError{fmt.Errorf("%s: this run needs about %s (%s), more than the %s; see docs/limits.md",
		flag, sysmem.Format(int64(min(need, 1<<62))), est.String(), b)}
}
