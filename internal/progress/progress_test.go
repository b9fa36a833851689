package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNilBarIsNoop(t *testing.T) {
	var b *Bar
	b.Add(1)
	b.Describe("x")
	b.Finish()
}

func TestLineModeThrottlesAndShowsRateAndETA(t *testing.T) {
	var out bytes.Buffer
	old := Output
	Output = &out
	defer func() { Output = old }()

	b := New(100, "epoch 1")
	b.Add(10)
	if out.Len() != 0 {
		t.Fatalf("line mode printed before the throttle interval: %q", out.String())
	}
	// Pretend the task started 10 s ago: the next Add must print one line.
	b.start = b.start.Add(-10 * time.Second)
	b.lastOut = b.lastOut.Add(-10 * time.Second)
	b.Add(10)
	got := out.String()
	for _, want := range []string{"epoch 1: 20/100 (20%)", "/s", "ETA"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if n := strings.Count(got, "\n"); n != 1 {
		t.Errorf("printed %d lines, want 1", n)
	}
	b.Finish()
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("Finish of a long task printed %d lines in all, want 2", n)
	}
}

func TestQuietGivesNil(t *testing.T) {
	Quiet = true
	defer func() { Quiet = false }()
	if New(10, "x") != nil {
		t.Fatal("Quiet bars must be nil")
	}
}
