package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/sysmem"
	"github.com/strata-gnn/strata/train"
)

// TestDevicesThatCannotFit: --devices cpu:1000 on Cora ran past 2 minutes
// or was OOM-killed at 24 GB (about 26 MB a virtual device). Virtual
// devices are capped, and a configuration whose estimate exceeds the
// machine's memory is refused with the estimate, in every mode, before
// anything is sized: one line, exit 2, a small peak memory.
func TestDevicesThatCannotFit(t *testing.T) {
	if !freshProcess(t) {
		return
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"train", "--devices", "cpu:1000"}, []string{"--devices cpu:1000: want cpu:N with N in 1..256"}},
		{[]string{"train", "--mode", "fullgraph", "--devices", "cpu:1000"}, []string{"--devices cpu:1000: want cpu:N with N in 1..256"}},
		// About 4.5 GB of model and optimizer state per device.
		{[]string{"train", "--devices", "cpu:256", "--hidden", "65536"}, []string{"--devices cpu:256: this run needs about", "model and optimizer", "available ("}},
		{[]string{"train", "--mode", "fullgraph", "--model", "sage", "--devices", "cpu:256", "--hidden", "65536"}, []string{"--devices cpu:256: this run needs about"}},
		// One device: 64 heads of 65536 on every node of every layer.
		{[]string{"train", "--model", "gat", "--heads", "64", "--hidden", "65536", "--layers", "16"}, []string{"--hidden: this run needs about"}},
	} {
		c := runChild(t, append(tc.args, "--epochs", "1")...)
		ok := c.code == 2 && strings.Count(c.stderr, "\n") == 1
		for _, w := range tc.want {
			ok = ok && strings.Contains(c.stderr, w)
		}
		if !ok {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, c.code, c.stderr, tc.want)
		}
		if c.maxRSS > 200<<20 {
			t.Errorf("%v: peak memory %s before refusing", tc.args, sysmem.Format(c.maxRSS))
		}
	}
}

// TestMemoryBudgetRefuses: the refusal compares the estimate with the
// budget the machine reports (here a fake 100 MiB) and names it.
func TestMemoryBudgetRefuses(t *testing.T) {
	saved := memoryBudget
	defer func() { memoryBudget = saved }()
	memoryBudget = func() (sysmem.Budget, bool) { return sysmem.Budget{Bytes: 100 << 20, Source: "test"}, true }
	code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:8", "--epochs", "1")
	if code != 2 || !strings.Contains(errOut, "--devices cpu:8: this run needs about") || !strings.Contains(errOut, "more than the 100 MiB available (test)") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
	code, _, errOut = strata(t, "train", "--quiet", "--mode", "fullgraph", "--model", "sage", "--devices", "cpu:2", "--hidden", "4096", "--epochs", "1")
	if code != 2 || !strings.Contains(errOut, "this run needs about") {
		t.Fatalf("fullgraph: exit %d, %q", code, errOut)
	}
	code, _, errOut = strata(t, "--quiet", "gen", t.TempDir()+"/g", "--preset", "small", "--features", "4096")
	if code != 2 || !strings.Contains(errOut, "--nodes, --scale: estimated peak memory") {
		t.Fatalf("gen: exit %d, %q", code, errOut)
	}
	// Without a budget (other systems) nothing is refused.
	memoryBudget = func() (sysmem.Budget, bool) { return sysmem.Budget{}, false }
	if code, _, errOut := strata(t, "train", "--quiet", "--devices", "cpu:2", "--hidden", "8", "--epochs", "1"); code != 0 {
		t.Fatalf("no budget: exit %d, %q", code, errOut)
	}
}

// TestVirtualDeviceCost measures what a CPU virtual device costs (the
// peak memory of cpu:20 minus cpu:4, over 16, with batches small enough
// that every device gets full ones) and checks the estimate
// (engine.EstimateMemory) is within a factor of two of it.
func TestVirtualDeviceCost(t *testing.T) {
	if testing.Short() {
		t.Skip("trains Cora on 4 and 20 virtual devices, twice")
	}
	if !freshProcess(t) {
		return
	}
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	const lo, hi = 4, 20
	for _, extra := range [][]string{nil, {"--cache", "0"}} {
		rss := map[int]int64{}
		est := map[int]float64{}
		for _, k := range []int{lo, hi} {
			list := fmt.Sprintf("cpu:%d", k)
			c := runChild(t, append([]string{"train", "--quiet", "--devices", list, "--epochs", "1", "--batch-size", "4"}, extra...)...)
			if c.code != 0 {
				t.Fatalf("%s: exit %d: %s", list, c.code, c.stderr)
			}
			rss[k] = c.maxRSS
			cfg := engine.Defaults(train.SAGE, k)
			cfg.CachePolicy, cfg.Train.BatchSize = cache.Auto, 4
			if extra != nil {
				cfg.CacheBytes = 0
			}
			if err := cfg.Normalize(); err != nil {
				t.Fatal(err)
			}
			m := engine.EstimateMemory(cfg, shapeOf(ds), true)
			est[k] = m.Total()
		}
		measured := float64(rss[hi]-rss[lo]) / (hi - lo)
		estimated := (est[hi] - est[lo]) / (hi - lo)
		t.Logf("%v: a virtual device costs %s measured, %s estimated", extra, sysmem.Format(int64(measured)), sysmem.Format(int64(estimated)))
		if estimated < measured/2 || estimated > 2*measured {
			t.Errorf("%v: estimate %s per device, measured %s", extra, sysmem.Format(int64(estimated)), sysmem.Format(int64(measured)))
		}
	}
}

// TestEvalEdges: the split nodes' in-degrees summed on an undirected
// dataset (its rows are the in-adjacency's), unknown (0) on a directed
// one.
func TestEvalEdges(t *testing.T) {
	// 0-1, 0-2, 1-2, 2-3 both ways: degrees 2, 2, 3, 1.
	g := &graph.CSR{NumRows: 4, NumCols: 4, Indptr: []int64{0, 2, 4, 7, 8},
		Indices: []graph.NodeID{1, 2, 0, 2, 0, 1, 3, 2}}
	ds := &dataset.Dataset{Graph: g, Train: []int32{0}, Val: []int32{2}, Test: []int32{3}}
	if got := evalEdges(ds); got != 2+3+1 {
		t.Errorf("undirected: %d in-edges, want 6", got)
	}
	if s := shapeOf(ds); s.EvalNodes != 3 || s.EvalEdges != 6 {
		t.Errorf("shape: %d split nodes, %d in-edges; want 3 and 6", s.EvalNodes, s.EvalEdges)
	}
	ds.Directed = true
	if got := evalEdges(ds); got != 0 {
		t.Errorf("directed: %d, want 0 (unknown)", got)
	}
}
