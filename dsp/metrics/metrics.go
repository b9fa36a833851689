package metrics

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Link is the kind of path bytes take.
type Link uint8

const (
	// Local: within the device's own memory (a device sending to itself,
	// rows of its own cache or topology).
	Local Link = iota
	// Peer: between devices of one host (NVLink or PCIe peer-to-peer on
	// GPUs; goroutine ranks on the CPU).
	Peer
	// Host: host memory read by a device (pinned memory through UVA on
	// GPUs): cold features, topology beyond the device budget.
	Host
	// Network: between hosts (a communicator spanning machines).
	Network
	numLinks
)

var linkNames = [numLinks]string{"local", "peer", "host", "network"}

func (l Link) String() string {
	if l < numLinks {
		return linkNames[l]
	}
	return fmt.Sprintf("link(%d)", uint8(l))
}

// Purpose says what bytes were moved for.
type Purpose uint8

const (
	Sample   Purpose = iota // collective sampling (frontiers, neighbors, walkers)
	Feature                 // feature rows and their requests
	Gradient                // gradient all-reduce
	numPurposes
)

var purposeNames = [numPurposes]string{"sample", "feature", "gradient"}

func (p Purpose) String() string {
	if p < numPurposes {
		return purposeNames[p]
	}
	return fmt.Sprintf("purpose(%d)", uint8(p))
}

// Stage names a pipeline stage.
type Stage uint8

const (
	Sampler Stage = iota
	Loader
	Trainer
	NumStages
)

var stageNames = [NumStages]string{"sampler", "loader", "trainer"}

func (s Stage) String() string {
	if s < NumStages {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// Counters are one device's counters. The zero value is ready; all
// methods are safe for concurrent use and a nil *Counters ignores updates.
type Counters struct {
	bytes [numPurposes][numLinks]atomic.Int64

	requests, localHits, peerHits atomic.Int64 // feature rows

	stages [NumStages]stageCounters
}

type stageCounters struct {
	items               atomic.Int64
	busy, in, out, sync atomic.Int64 // nanoseconds
}

// AddBytes counts n bytes moved over link for purpose.
func (c *Counters) AddBytes(p Purpose, l Link, n int64) {
	if c == nil || p >= numPurposes || l >= numLinks || n == 0 {
		return
	}
	c.bytes[p][l].Add(n)
}

// Bytes returns the bytes counted so far for (p, l).
func (c *Counters) Bytes(p Purpose, l Link) int64 {
	if c == nil || p >= numPurposes || l >= numLinks {
		return 0
	}
	return c.bytes[p][l].Load()
}

// AddCache counts a feature load of requests distinct rows of which
// localHits came from this device's cache and peerHits from peers'
// caches; the rest were misses served from host memory.
func (c *Counters) AddCache(requests, localHits, peerHits int64) {
	if c == nil {
		return
	}
	c.requests.Add(requests)
	c.localHits.Add(localHits)
	c.peerHits.Add(peerHits)
}

// StageBusy adds one processed item and the time spent on it.
func (c *Counters) StageBusy(s Stage, d time.Duration) {
	if c == nil || s >= NumStages {
		return
	}
	c.stages[s].items.Add(1)
	c.stages[s].busy.Add(int64(d))
}

// StageWaitIn adds time a stage spent waiting for its input.
func (c *Counters) StageWaitIn(s Stage, d time.Duration) {
	if c == nil || s >= NumStages {
		return
	}
	c.stages[s].in.Add(int64(d))
}

// StageWaitOut adds time a stage spent blocked handing its output on.
func (c *Counters) StageWaitOut(s Stage, d time.Duration) {
	if c == nil || s >= NumStages {
		return
	}
	c.stages[s].out.Add(int64(d))
}

// StageSync adds time, within the stage's busy time, that its host spent
// blocked on the device or on peers: reads of device results and
// collectives that return when done. Busy minus sync is host work and
// launches; a stage whose busy time is mostly sync is latency-bound.
func (c *Counters) StageSync(s Stage, d time.Duration) {
	if c == nil || s >= NumStages {
		return
	}
	c.stages[s].sync.Add(int64(d))
}

// StageSnapshot is a stage's totals.
type StageSnapshot struct {
	Name           string  `json:"name"`
	Items          int64   `json:"items"`
	BusySeconds    float64 `json:"busy_seconds"`
	WaitInSeconds  float64 `json:"wait_in_seconds"`
	WaitOutSeconds float64 `json:"wait_out_seconds"`
	SyncSeconds    float64 `json:"sync_seconds"` // within BusySeconds: blocked on the device or peers
}

// QueueSnapshot describes a bounded queue between two stages.
type QueueSnapshot struct {
	Name     string `json:"name"`
	Capacity int    `json:"capacity"`
	Pushes   int64  `json:"pushes"`
	// MeanOccupancy is the time-weighted mean number of queued items;
	// MaxOccupancy the largest seen.
	MeanOccupancy float64 `json:"mean_occupancy"`
	MaxOccupancy  int     `json:"max_occupancy"`
	// ItemSeconds is the integral of the number of queued items over
	// the Seconds the queue has existed (MeanOccupancy's terms): two
	// snapshots of a device give the mean between them
	// (RankSnapshot.Since). Not summed by Summarize.
	ItemSeconds float64 `json:"item_seconds,omitempty"`
	Seconds     float64 `json:"seconds,omitempty"`
}

// CacheSnapshot is the feature cache's hit count. Requests counts distinct
// rows per batch; HitRate = (LocalHits + PeerHits) / Requests.
type CacheSnapshot struct {
	Requests  int64   `json:"requests"`
	LocalHits int64   `json:"local_hits"`
	PeerHits  int64   `json:"peer_hits"`
	Misses    int64   `json:"misses"`
	HitRate   float64 `json:"hit_rate"`
}

// RankSnapshot is one device's metrics. Bytes[purpose][link] counts bytes
// this device sent (or, for host and local reads, read).
type RankSnapshot struct {
	Rank   int                         `json:"rank"`
	Stages []StageSnapshot             `json:"stages"`
	Queues []QueueSnapshot             `json:"queues,omitempty"`
	Bytes  map[string]map[string]int64 `json:"bytes"`
	Cache  CacheSnapshot               `json:"cache"`
}

// Snapshot copies the counters.
func (c *Counters) Snapshot(rank int) RankSnapshot {
	s := RankSnapshot{Rank: rank, Bytes: map[string]map[string]int64{}}
	if c == nil {
		return s
	}
	for p := Purpose(0); p < numPurposes; p++ {
		m := map[string]int64{}
		for l := Link(0); l < numLinks; l++ {
			m[l.String()] = c.bytes[p][l].Load()
		}
		s.Bytes[p.String()] = m
	}
	for st := Stage(0); st < NumStages; st++ {
		sc := &c.stages[st]
		s.Stages = append(s.Stages, StageSnapshot{
			Name: st.String(), Items: sc.items.Load(),
			BusySeconds:    time.Duration(sc.busy.Load()).Seconds(),
			WaitInSeconds:  time.Duration(sc.in.Load()).Seconds(),
			WaitOutSeconds: time.Duration(sc.out.Load()).Seconds(),
			SyncSeconds:    time.Duration(sc.sync.Load()).Seconds(),
		})
	}
	req, lh, ph := c.requests.Load(), c.localHits.Load(), c.peerHits.Load()
	s.Cache = CacheSnapshot{Requests: req, LocalHits: lh, PeerHits: ph, Misses: req - lh - ph}
	if req > 0 {
		s.Cache.HitRate = float64(lh+ph) / float64(req)
	}
	return s
}

// Since returns what the device did between prev, an earlier snapshot of
// the same device, and r: stage items and times, bytes and cache counts
// are differences, a queue's pushes too and its mean occupancy is over
// the interval (MaxOccupancy stays the largest so far). A zero prev
// (no stages, no queues) gives r: the work since the start.
func (r RankSnapshot) Since(prev RankSnapshot) RankSnapshot {
	out := RankSnapshot{Rank: r.Rank, Bytes: map[string]map[string]int64{}}
	for p, m := range r.Bytes {
		out.Bytes[p] = map[string]int64{}
		for l, n := range m {
			out.Bytes[p][l] = n - prev.Bytes[p][l]
		}
	}
	for i, st := range r.Stages {
		if i < len(prev.Stages) {
			q := prev.Stages[i]
			st.Items -= q.Items
			st.BusySeconds -= q.BusySeconds
			st.WaitInSeconds -= q.WaitInSeconds
			st.WaitOutSeconds -= q.WaitOutSeconds
			st.SyncSeconds -= q.SyncSeconds
		}
		out.Stages = append(out.Stages, st)
	}
	for i, q := range r.Queues {
		if i < len(prev.Queues) {
			p := prev.Queues[i]
			q.Pushes -= p.Pushes
			q.ItemSeconds -= p.ItemSeconds
			q.Seconds -= p.Seconds
			q.MeanOccupancy = 0
			if q.Seconds > 0 {
				q.MeanOccupancy = q.ItemSeconds / q.Seconds
			}
		}
		out.Queues = append(out.Queues, q)
	}
	c := r.Cache
	c.Requests -= prev.Cache.Requests
	c.LocalHits -= prev.Cache.LocalHits
	c.PeerHits -= prev.Cache.PeerHits
	c.Misses -= prev.Cache.Misses
	c.HitRate = 0
	if c.Requests > 0 {
		c.HitRate = float64(c.LocalHits+c.PeerHits) / float64(c.Requests)
	}
	out.Cache = c
	return out
}

// Summary totals the ranks' snapshots: bytes and cache counts add up, stage
// times are the maximum over ranks (the slowest device sets the pace).
// Queues of the same name are merged: pushes add up, the mean occupancy
// is averaged over ranks and the maximum is the largest.
type Summary struct {
	Devices int                         `json:"devices"`
	Bytes   map[string]map[string]int64 `json:"bytes"`
	Cache   CacheSnapshot               `json:"cache"`
	Stages  []StageSnapshot             `json:"stages"`
	Queues  []QueueSnapshot             `json:"queues,omitempty"`
}

// Summarize totals rank snapshots.
func Summarize(ranks []RankSnapshot) Summary {
	s := Summary{Devices: len(ranks), Bytes: map[string]map[string]int64{}}
	for _, r := range ranks {
		for p, m := range r.Bytes {
			if s.Bytes[p] == nil {
				s.Bytes[p] = map[string]int64{}
			}
			for l, n := range m {
				s.Bytes[p][l] += n
			}
		}
		s.Cache.Requests += r.Cache.Requests
		s.Cache.LocalHits += r.Cache.LocalHits
		s.Cache.PeerHits += r.Cache.PeerHits
		s.Cache.Misses += r.Cache.Misses
		for i, q := range r.Queues {
			if i >= len(s.Queues) {
				s.Queues = append(s.Queues, QueueSnapshot{Name: q.Name, Capacity: q.Capacity})
			}
			m := &s.Queues[i]
			m.Pushes += q.Pushes
			m.MeanOccupancy += q.MeanOccupancy / float64(len(ranks))
			m.MaxOccupancy = max(m.MaxOccupancy, q.MaxOccupancy)
		}
		for i, st := range r.Stages {
			if i >= len(s.Stages) {
				s.Stages = append(s.Stages, StageSnapshot{Name: st.Name})
			}
			m := &s.Stages[i]
			m.Items = max(m.Items, st.Items)
			m.BusySeconds = max(m.BusySeconds, st.BusySeconds)
			m.WaitInSeconds = max(m.WaitInSeconds, st.WaitInSeconds)
			m.WaitOutSeconds = max(m.WaitOutSeconds, st.WaitOutSeconds)
			m.SyncSeconds = max(m.SyncSeconds, st.SyncSeconds)
		}
	}
	if s.Cache.Requests > 0 {
		s.Cache.HitRate = float64(s.Cache.LocalHits+s.Cache.PeerHits) / float64(s.Cache.Requests)
	}
	return s
}

// String is a one-line summary for training logs: busy time per stage
// (slowest device), mean queue occupancy, cache hit rate and the bytes
// sent between devices and read from host memory, over what the
// summarized snapshots cover (the whole run, or one epoch with Since).
func (s Summary) String() string {
	var b strings.Builder
	b.WriteString("busy")
	for _, st := range s.Stages {
		fmt.Fprintf(&b, " %s %.2fs", st.Name, st.BusySeconds)
		if st.SyncSeconds > 0 {
			fmt.Fprintf(&b, " (%.2fs waiting on the device)", st.SyncSeconds)
		}
	}
	if len(s.Queues) > 0 {
		b.WriteString(" | queued")
		for _, q := range s.Queues {
			fmt.Fprintf(&b, " %.1f/%d", q.MeanOccupancy, q.Capacity)
		}
	}
	fmt.Fprintf(&b, " | cache hit %.1f%%", 100*s.Cache.HitRate)
	var peer, host, net int64
	for _, m := range s.Bytes {
		peer += m[Peer.String()]
		host += m[Host.String()]
		net += m[Network.String()]
	}
	fmt.Fprintf(&b, " | peer %s host %s", human(peer), human(host))
	if net > 0 {
		fmt.Fprintf(&b, " network %s", human(net))
	}
	return b.String()
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
