package runner

import (
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/train"
)

func TestCachedRows(t *testing.T) {
	const n, f = 1000, 10 // 40 bytes a row
	for _, tc := range []struct {
		policy cache.Policy
		group  int
		budget int64
		k      int
		want   float64
	}{
		{cache.Partition, 0, -1, 4, 250},         // all rows, split over 4
		{cache.Partition, 0, 40 * 100, 4, 100},   // the budget binds
		{cache.Replicate, 1, -1, 4, 1000},        // a full copy each
		{cache.Replicate, 2, -1, 4, 500},         // a copy per pair
		{cache.Auto, 0, -1, 4, 1000},             // every row fits one device: replicate
		{cache.Auto, 0, 40 * 300, 4, 250},        // 2 x 300 < 1000: partition over 4
		{cache.Auto, 0, 40 * 600, 4, 500},        // groups of 2 hold every row
		{cache.Partition, 0, 0, 4, 0},            // no cache
		{cache.Replicate, 1, 40 * 10, 8, 10},     // budget binds a replica
		{cache.Auto, 0, 1 << 40, 1000, n},        // one device holds all
		{cache.Partition, 0, -1, 3, (n + 2) / 3}, // rounded up
	} {
		cfg := Config{Devices: tc.k, CacheBytes: tc.budget, CachePolicy: tc.policy, CacheGroup: tc.group}
		if got := cachedRows(cfg, n, f); got != tc.want {
			t.Errorf("%+v: cachedRows = %v, want %v", tc, got, tc.want)
		}
	}
}

// TestEstimateMemoryScales: the per-device parts count once per CPU
// virtual device and not at all on GPUs; the device engine does not copy
// the cache.
func TestEstimateMemoryScales(t *testing.T) {
	s := train.Shape{Nodes: 2708, Edges: 10556, FeatDim: 1433, Classes: 7, TrainNodes: 140}
	cfg := Defaults(train.SAGE, 8)
	cfg.CachePolicy = cache.Auto // the command's default
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	host := EstimateMemory(cfg, s, true, true)
	gpu := EstimateMemory(cfg, s, false, true)
	noCopy := EstimateMemory(cfg, s, true, false)
	cfg.Devices = 16
	host16 := EstimateMemory(cfg, s, true, true)
	perDevice := (host16.Total() - host.Total()) / 8
	// A full feature copy each (15.5 MB on Cora) plus model and batches.
	if perDevice < 4*2708*1433 || perDevice > 40<<20 {
		t.Errorf("per device %.0f bytes", perDevice)
	}
	if gpu.Total() >= host.Total()/4 || noCopy.Total() >= host.Total() {
		t.Errorf("host %v, gpu %v, device engine %v", host.Total(), gpu.Total(), noCopy.Total())
	}
	if l := host16.Largest(); l.Flag != "--cache" || l.Count != 16 {
		t.Errorf("largest part %+v, want the feature cache on 16 devices", l)
	}
}
