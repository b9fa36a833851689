//go:build linux

package gpushm

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// tracer accumulates phase times of the all-reduces ($STRATA_GPUSHM_TRACE=1)
// and prints their means when the communicator closes. Device times are
// measured from a calibration mark recorded on an idle stream when the
// operation starts, so "late" (host time minus device time of the same
// moment) is how long after the device finished the host noticed.
type tracer struct {
	mu   sync.Mutex
	rank int
	path string // device path: on, or why not

	pipeN                           int
	firstIn, allIn, allRed, end     time.Duration // host, from the call
	gpuN                            int
	gpuBegun, gpuIn, gpuOut         time.Duration // device, from the mark
	lateIn, lateEnd                 time.Duration
	devN                            int
	devQueue, devWait               time.Duration // host: queueing, then waiting (synchronous)
	devGPUN                         int
	devGPUStart, devGPUEnd, devLate time.Duration
	naps                            int
	napTime                         time.Duration
}

// pipeTimes are the host times of one host-pipeline all-reduce, and the
// slots of its first and last chunks.
type pipeTimes struct {
	start, firstIn, allIn, allRed, end time.Time
	firstSlot, lastSlot                int
}

// pipeTimer is what a mover that can time the pipeline on the device has.
type pipeTimer interface {
	pipeTiming(sIn, sOut int) (begun, in, out time.Duration, ok bool)
}

func (tr *tracer) nap(d time.Duration) {
	tr.mu.Lock()
	tr.naps++
	tr.napTime += d
	tr.mu.Unlock()
}

func (tr *tracer) pipeOp(mv mover, pt pipeTimes) {
	if pt.end.IsZero() {
		return // failed
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.pipeN++
	tr.firstIn += pt.firstIn.Sub(pt.start)
	tr.allIn += pt.allIn.Sub(pt.start)
	tr.allRed += pt.allRed.Sub(pt.start)
	tr.end += pt.end.Sub(pt.start)
	ptm, ok := mv.(pipeTimer)
	if !ok {
		return
	}
	begun, in, out, ok := ptm.pipeTiming(pt.firstSlot, pt.lastSlot)
	if !ok {
		return
	}
	tr.gpuN++
	tr.gpuBegun += begun
	tr.gpuIn += in
	tr.gpuOut += out
	tr.lateIn += pt.firstIn.Sub(pt.start) - in
	tr.lateEnd += pt.end.Sub(pt.start) - out
}

func (tr *tracer) devOp(st streamer, p *pendOp, done time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.devN++
	tr.devQueue += p.queued.Sub(p.start)
	tr.devWait += done.Sub(p.queued)
	start, end, ok := st.timing(p.op.ticket)
	if !ok {
		return
	}
	tr.devGPUN++
	tr.devGPUStart += start
	tr.devGPUEnd += end
	// The mark was recorded when queueing began (host time p.start +
	// a little): done - p.start - end is how late the host noticed.
	tr.devLate += done.Sub(p.start) - end
}

func us(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d.Microseconds())/float64(n))
}

// report writes one summary line.
func (tr *tracer) report(w io.Writer) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "gpushm trace rank %d: device path %s;", tr.rank, tr.path)
	fmt.Fprintf(&b, " pipeline ops=%d host_us first_in=%s all_in=%s all_reduced=%s end=%s",
		tr.pipeN, us(tr.firstIn, tr.pipeN), us(tr.allIn, tr.pipeN), us(tr.allRed, tr.pipeN), us(tr.end, tr.pipeN))
	fmt.Fprintf(&b, " gpu_us began=%s first_in=%s last_out=%s late_us first_in=%s end=%s;",
		us(tr.gpuBegun, tr.gpuN), us(tr.gpuIn, tr.gpuN), us(tr.gpuOut, tr.gpuN), us(tr.lateIn, tr.gpuN), us(tr.lateEnd, tr.gpuN))
	fmt.Fprintf(&b, " device ops=%d host_us queue=%s wait=%s gpu_us start=%s end=%s op=%s late_us=%s;",
		tr.devN, us(tr.devQueue, tr.devN), us(tr.devWait, tr.devN), us(tr.devGPUStart, tr.devGPUN), us(tr.devGPUEnd, tr.devGPUN),
		us(tr.devGPUEnd-tr.devGPUStart, tr.devGPUN), us(tr.devLate, tr.devGPUN))
	fmt.Fprintf(&b, " naps=%d nap_us=%s", tr.naps, us(tr.napTime, tr.naps))
	fmt.Fprintln(w, b.String())
}
