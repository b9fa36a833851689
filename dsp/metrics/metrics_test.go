package metrics

import (
	"strings"
	"testing"
	"time"
)

func TestCountersAndSummary(t *testing.T) {
	var a, b Counters
	a.AddBytes(Sample, Peer, 100)
	a.AddBytes(Feature, Host, 40)
	b.AddBytes(Sample, Peer, 20)
	b.AddBytes(Gradient, Network, 8)
	a.AddCache(10, 4, 3)
	b.AddCache(10, 10, 0)
	a.StageBusy(Loader, 2*time.Second)
	b.StageBusy(Loader, time.Second)
	b.StageWaitIn(Trainer, time.Second)
	a.StageSync(Sampler, time.Second/2)
	b.StageSync(Sampler, time.Second/4)
	var nilC *Counters
	nilC.AddBytes(Sample, Peer, 1) // ignored, no panic
	ra, rb := a.Snapshot(0), b.Snapshot(1)
	ra.Queues = []QueueSnapshot{{Name: "q", Capacity: 2, Pushes: 3, MeanOccupancy: 1, MaxOccupancy: 2}}
	rb.Queues = []QueueSnapshot{{Name: "q", Capacity: 2, Pushes: 3, MeanOccupancy: 0.5, MaxOccupancy: 1}}
	if ra.Cache.Misses != 3 || ra.Cache.HitRate != 0.7 {
		t.Fatalf("rank 0 cache %+v", ra.Cache)
	}
	s := Summarize([]RankSnapshot{ra, rb})
	if s.Bytes["sample"]["peer"] != 120 || s.Bytes["feature"]["host"] != 40 || s.Bytes["gradient"]["network"] != 8 {
		t.Fatalf("bytes %v", s.Bytes)
	}
	if s.Cache.Requests != 20 || s.Cache.HitRate != 17.0/20 {
		t.Fatalf("cache %+v", s.Cache)
	}
	if s.Stages[Loader].BusySeconds != 2 || s.Stages[Loader].Items != 1 || s.Stages[Trainer].WaitInSeconds != 1 || s.Stages[Sampler].SyncSeconds != 0.5 {
		t.Fatalf("stages %+v", s.Stages)
	}
	if q := s.Queues[0]; q.Pushes != 6 || q.MeanOccupancy != 0.75 || q.MaxOccupancy != 2 {
		t.Fatalf("queues %+v", s.Queues)
	}
	line := s.String()
	for _, want := range []string{"loader 2.00s", "queued 0.8/2", "cache hit 85.0%", "peer 120B", "host 40B"} {
		if !strings.Contains(line, want) {
			t.Fatalf("summary %q lacks %q", line, want)
		}
	}
}
