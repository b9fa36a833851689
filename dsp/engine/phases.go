package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/partition/book"
)

// SetupPhase is the wall time of one phase between the start of a run
// (Options.Start) and its first batch (RunInfo.SetupPhases).
//
// The caller's phases come first (strata train: "devices", opening the
// back ends; then dataset.Open's "open", "verify" and "validate"), then
// Run's, in this order: "check" (train.CheckDataset: counts, splits,
// and the edges of a dataset Open did not validate), "partition" (the
// book: free with range partitioning), "graph" (the in-adjacency, a
// transpose for directed graphs), "features" (row normalization when it
// applies, the density count), "hotness" (the cache's ranking), "plan"
// (the cache plan), "patches" (every device's patch of the topology, built
// concurrently), "comms" (communicators and stream handles), "checkpoint"
// (opening or resuming one), "placement" (every device's setup, run
// concurrently: until the last is ready), "first batch" (the pipeline's
// first sample, load and step, from then to the end of device 0's first
// step) and "other" (the time no phase covers: parsing the command line,
// the memory check, logging). Per device (Device >= 0), the
// parts of its placement: "topology" (its samplers, with the patch on
// the device), "feature cache" (its rows on the device), "model" (model,
// optimizer and gradient buffers) and "placement" (all of its setup).
type SetupPhase struct {
	Phase string `json:"phase"`
	// Device is the device's rank for a per-device phase, -1 otherwise.
	Device  int     `json:"device"`
	Seconds float64 `json:"seconds"`
}

// setupClock times a run's setup: the caller's phases, then Run's, shown
// while they run (bars on stderr, as the other progress bars) unless the
// run has no log.
type setupClock struct {
	origin time.Time // the run's start (Options.Start, or Run's)
	ph     *progress.Phases
	once   sync.Once
	mu     sync.Mutex
	begun  []*progress.Phase
	placed time.Time // when the last device's setup ended
}

func newSetupClock(opts *Options, runStart time.Time) *setupClock {
	c := &setupClock{origin: opts.Start, ph: &progress.Phases{Quiet: opts.Log == nil}}
	if c.origin.IsZero() {
		c.origin = runStart
	}
	for _, p := range opts.Phases {
		c.ph.Record(p.Phase, p.Device, time.Duration(p.Seconds*float64(time.Second)))
	}
	return c
}

// begin starts a phase of the whole run (end it with End); total > 0 is
// its work in units that Phase.Add counts, for an ETA.
func (c *setupClock) begin(name string, total int64) *progress.Phase {
	p := c.ph.Begin(name, total)
	c.mu.Lock()
	c.begun = append(c.begun, p)
	c.mu.Unlock()
	return p
}

// setupDone notes that every device is set up.
func (c *setupClock) setupDone() {
	c.mu.Lock()
	c.placed = time.Now()
	c.mu.Unlock()
}

// close ends the phases a failed setup left running (their bars).
func (c *setupClock) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.begun {
		p.End()
	}
}

// device records a part of device rank's setup.
func (c *setupClock) device(name string, rank int, d time.Duration) {
	c.ph.Record(name, rank, d)
}

// spans are the recorded phases, for the report.
func (c *setupClock) spans() []SetupPhase {
	var out []SetupPhase
	for _, s := range c.ph.Spans() {
		out = append(out, SetupPhase{Phase: s.Name, Device: s.Device, Seconds: s.Seconds})
	}
	return out
}

// firstBatch notes, once, that device 0 has trained its first batch: the
// time since the start and the phases go into the run's info, and a line
// into the log.
func (s *shared) firstBatch() {
	c := s.clock
	c.once.Do(func() {
		now := time.Now()
		took := now.Sub(c.origin).Seconds()
		// The pipeline's first sample, load and step, after the last
		// device was placed; then what no phase covers (the caller's
		// parsing, memory check and logging).
		c.mu.Lock()
		placed := c.placed
		c.mu.Unlock()
		if !placed.IsZero() {
			c.ph.Record("first batch", -1, now.Sub(placed))
		}
		var timed float64
		for _, sp := range c.ph.Spans() {
			if sp.Device < 0 {
				timed += sp.Seconds
			}
		}
		c.ph.Record("other", -1, time.Duration(max(took-timed, 0)*float64(time.Second)))
		s.mu.Lock()
		s.run.FirstBatchSeconds = took
		s.run.SetupPhases = c.spans()
		s.mu.Unlock()
		if w := s.opts.Log; w != nil {
			fmt.Fprintf(w, "first batch %.1fs after the start; setup: %s\n", took, c.ph.Summary())
		}
	})
}

// crossEdges counts the in-adjacency entries of in whose source another
// device of b owns, one goroutine per device's rows.
func crossEdges(in *graph.CSR, b *book.Book) int64 {
	counts := make([]int64, b.K())
	var wg sync.WaitGroup
	for r := range b.K() {
		wg.Go(func() {
			lo, hi := b.Range(r)
			var n int64
			for _, u := range in.Indices[in.Indptr[lo]:in.Indptr[hi]] {
				if int64(u) < lo || int64(u) >= hi {
					n++
				}
			}
			counts[r] = n
		})
	}
	wg.Wait()
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}
