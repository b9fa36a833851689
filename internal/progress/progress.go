package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar reports progress of a counted task.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	width    int // terminal width, tty mode only
	desc     string
	total    int64
	done     int64
	start    time.Time
	lastOut  time.Time
	interval time.Duration
	drawn    bool
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
	b := &Bar{w: Output, desc: desc, total: total, start: now, lastOut: now, interval: 5 * time.Second}
	if f, ok := Output.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		b.tty = true
		b.interval = 100 * time.Millisecond
		b.lastOut = time.Time{}
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 {
			b.width = w
		} else {
			b.width = 80
		}
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
	if now := time.Now(); now.Sub(b.lastOut) >= b.interval {
		b.lastOut = now
		b.draw(now)
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
}

// Finish completes the bar: a terminal line is cleared; in line mode a
// final line is printed when the task was long enough to have shown one.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty {
		if b.drawn {
			fmt.Fprint(b.w, "\r\033[K")
		}
		return
	}
	if time.Since(b.start) >= b.interval {
		fmt.Fprintln(b.w, b.line(time.Now()))
	}
}

func (b *Bar) draw(now time.Time) {
	s := b.line(now)
	if !b.tty {
		fmt.Fprintln(b.w, s)
		return
	}
	if b.total > 0 {
		// Fill what is left of the terminal line with a bar.
		if room := b.width - len(s) - 4; room >= 10 {
			fill := int(float64(room) * float64(min(b.done, b.total)) / float64(b.total))
			s = "[" + strings.Repeat("=", fill) + strings.Repeat(" ", room-fill) + "] " + s
		}
	}
	if len(s) > b.width-1 {
		s = s[:b.width-1]
	}
	fmt.Fprint(b.w, "\r\033[K"+s)
	b.drawn = true
}

func (b *Bar) line(now time.Time) string {
	el := now.Sub(b.start).Seconds()
	if b.total <= 0 && b.done == 0 {
		// Nothing counted (a phase that cannot count its work): say how
		// long it has been running.
		return fmt.Sprintf("%s: running for %s", b.desc, time.Duration(el*float64(time.Second)).Round(time.Second))
	}
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
