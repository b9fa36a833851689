package progress

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPhasesRecordAndSummary(t *testing.T) {
	Quiet = true
	defer func() { Quiet = false }()
	var p Phases
	p.Record("open", -1, 100*time.Millisecond)
	ph := p.Begin("verify", 10)
	ph.Add(10)
	d := ph.End()
	if again := ph.End(); again != d {
		t.Fatalf("second End returned %v, want the first's %v", again, d)
	}
	p.Record("placement", 1, 2*time.Second)
	p.Record("placement", 0, time.Second)
	p.Record("placement", -1, 2500*time.Millisecond)
	p.Record("features", 0, 300*time.Millisecond)
	p.Record("features", 1, 500*time.Millisecond)
	spans := p.Spans()
	if len(spans) != 7 {
		t.Fatalf("%d spans, want 7 (verify recorded once): %+v", len(spans), spans)
	}
	if s := spans[1]; s.Name != "verify" || s.Device != -1 || s.Seconds != d.Seconds() {
		t.Fatalf("span 1 = %+v, want verify of the whole task lasting %v", s, d)
	}
	got := p.Summary()
	want := "open 0.10s, verify " + strings.TrimSuffix(strings.Fields(got)[3], ",") +
		", placement 2.50s (devices 1.00s..2.00s), features 0.30s..0.50s (2 devices)"
	if got != want {
		t.Fatalf("summary\n %q, want\n %q", got, want)
	}
}

func TestNilPhasesAreNoops(t *testing.T) {
	var p *Phases
	ph := p.Begin("x", 5)
	ph.Add(1)
	ph.End()
	p.Record("y", 0, time.Second)
	if p.Spans() != nil || p.Summary() != "" {
		t.Fatal("a nil Phases recorded something")
	}
	q := &Phases{Quiet: true}
	if ph := q.Begin("z", 0); ph.bar != nil {
		t.Fatal("a quiet Phases shows a bar")
	} else if ph.End(); len(q.Spans()) != 1 {
		t.Fatal("a quiet Phases does not time its phases")
	}
	var nilPhase *Phase
	nilPhase.Add(1)
	if nilPhase.End() != 0 {
		t.Fatal("a nil Phase has a duration")
	}
}

// An uncounted phase says how long it has been running, refreshed by its
// ticker without any Add.
func TestUncountedPhaseShowsRunningTime(t *testing.T) {
	var out bytes.Buffer
	oldOut, oldTick := Output, tick
	Output, tick = &out, time.Millisecond
	defer func() { Output, tick = oldOut, oldTick }()
	var p Phases
	ph := p.Begin("hotness", 0)
	// Pretend the phase started 10 s ago: the ticker's next refresh
	// prints one line.
	ph.bar.mu.Lock()
	ph.bar.start = ph.bar.start.Add(-10 * time.Second)
	ph.bar.lastOut = ph.bar.lastOut.Add(-10 * time.Second)
	ph.bar.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ph.bar.mu.Lock()
		n := out.Len()
		ph.bar.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ticker printed nothing within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	ph.End()
	// 10s, or a little more on a loaded machine.
	if got := out.String(); !regexp.MustCompile(`^hotness: running for 1\ds\n`).MatchString(got) {
		t.Fatalf("output %q, want it to start with the running time", got)
	}
}
