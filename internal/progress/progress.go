// Package progress shows progress bars with rate and ETA on long work
// (imports, generation, epochs). On a terminal it draws a bar; on a pipe or
// file it prints at most one line every few seconds so logs stay readable.
// A nil *Bar is valid and does nothing, so library code can take an optional
// bar.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar reports progress of a counted task.
type Bar struct {
	mu      sync.Mutex
	bar     *progressbar.ProgressBar // terminal mode
	w       io.Writer                // line mode
	desc    string
	total   int64
	done    int64
	start   time.Time
	lastOut time.Time
}

// Quiet disables all bars (tests and --quiet set it).
var Quiet bool

// Output is where bars are written; stderr by default.
var Output io.Writer = os.Stderr

// New starts a bar for total units of work described by desc. total <= 0
// means unknown.
func New(total int64, desc string) *Bar {
	if Quiet {
		return nil
	}
	now := time.Now()
	// lastOut starts at now so line mode's first line comes after the
	// throttle interval: short tasks (one epoch) print nothing.
	b := &Bar{desc: desc, total: total, start: now, lastOut: now}
	if f, ok := Output.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		b.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	} else {
		b.w = Output
	}
	return b
}

// Add records n more units done.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if b.bar != nil {
		_ = b.bar.Add64(n)
		return
	}
	if now := time.Now(); now.Sub(b.lastOut) >= 5*time.Second {
		b.lastOut = now
		fmt.Fprintln(b.w, b.line(now))
	}
}

// Describe changes the description (e.g. to show the running loss).
func (b *Bar) Describe(desc string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.desc = desc
	if b.bar != nil {
		b.bar.Describe(desc)
	}
}

// Finish completes the bar.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Finish()
		return
	}
	if time.Since(b.start) >= 5*time.Second {
		fmt.Fprintln(b.w, b.line(time.Now()))
	}
}

func (b *Bar) line(now time.Time) string {
	el := now.Sub(b.start).Seconds()
	rate := float64(b.done) / max(el, 1e-9)
	s := fmt.Sprintf("%s: %d", b.desc, b.done)
	if b.total > 0 {
		s += fmt.Sprintf("/%d (%.0f%%)", b.total, 100*float64(b.done)/float64(b.total))
	}
	s += fmt.Sprintf(" %.1f/s", rate)
	if b.total > 0 && rate > 0 {
		eta := time.Duration(float64(b.total-b.done) / rate * float64(time.Second))
		s += " ETA " + eta.Round(time.Second).String()
	}
	return s
}
