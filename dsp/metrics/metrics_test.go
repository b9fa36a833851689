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

// TestSince: the figures between two snapshots of a device are the
// differences of its counters (an epoch's work, not the run's so far),
// and they add up: the first interval plus the second is the total.
func TestSince(t *testing.T) {
	var c Counters
	c.StageBusy(Trainer, time.Second)
	c.StageBusy(Trainer, time.Second)
	c.StageWaitIn(Loader, time.Second/2)
	c.AddBytes(Feature, Peer, 100)
	c.AddCache(10, 5, 1)
	first := c.Snapshot(1)
	first.Queues = []QueueSnapshot{{Name: "q", Capacity: 2, Pushes: 4, MeanOccupancy: 0.5, MaxOccupancy: 2, ItemSeconds: 1, Seconds: 2}}
	c.StageBusy(Trainer, 3*time.Second)
	c.StageSync(Trainer, time.Second)
	c.AddBytes(Feature, Peer, 20)
	c.AddCache(10, 10, 0)
	second := c.Snapshot(1)
	second.Queues = []QueueSnapshot{{Name: "q", Capacity: 2, Pushes: 10, MeanOccupancy: 1.5, MaxOccupancy: 2, ItemSeconds: 7, Seconds: 6}}

	d := second.Since(first)
	tr := d.Stages[Trainer]
	if tr.Items != 1 || tr.BusySeconds != 3 || tr.SyncSeconds != 1 || d.Stages[Loader].WaitInSeconds != 0 {
		t.Fatalf("stages since the first snapshot: %+v", d.Stages)
	}
	if d.Bytes["feature"]["peer"] != 20 || d.Cache.Requests != 10 || d.Cache.LocalHits != 10 || d.Cache.HitRate != 1 || d.Rank != 1 {
		t.Fatalf("bytes %v cache %+v rank %d", d.Bytes, d.Cache, d.Rank)
	}
	if q := d.Queues[0]; q.Pushes != 6 || q.MeanOccupancy != 1.5 || q.ItemSeconds != 6 || q.Seconds != 4 {
		t.Fatalf("queue since the first snapshot: %+v", q)
	}
	if line := Summarize([]RankSnapshot{d}).String(); !strings.Contains(line, "trainer 3.00s") || !strings.Contains(line, "queued 1.5/2") {
		t.Fatalf("line %q", line)
	}
	// From the start: the first snapshot itself; the two intervals add up.
	z := first.Since(RankSnapshot{})
	if z.Stages[Trainer].BusySeconds != 2 || z.Cache != first.Cache || z.Queues[0] != first.Queues[0] {
		t.Fatalf("since the start: %+v", z)
	}
	for i := range second.Stages {
		s, a, b := second.Stages[i], z.Stages[i], d.Stages[i]
		if a.Items+b.Items != s.Items || a.BusySeconds+b.BusySeconds != s.BusySeconds || a.WaitInSeconds+b.WaitInSeconds != s.WaitInSeconds {
			t.Fatalf("stage %s: %+v + %+v != %+v", s.Name, a, b, s)
		}
	}
}
