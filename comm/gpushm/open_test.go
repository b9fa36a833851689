//go:build linux

package gpushm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// openRanks calls Open on n goroutine ranks sharing an in-process store,
// within a 20 s deadline, and returns the communicators and errors.
func openRanks(t *testing.T, n int, o Options, before func(stores []rendezvous.Store)) ([]comm.Comm, []error) {
	t.Helper()
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stores := rendezvous.NewLocal(n)
	if before != nil {
		before(stores)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dcs, errs := make([]comm.Comm, n), make([]error, n)
	done := make(chan struct{}, n)
	for r := 0; r < n; r++ {
		go func() {
			defer func() { done <- struct{}{} }()
			dcs[r], errs[r] = Open(ctx, stores[r], be, o)
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-time.After(25 * time.Second):
			t.Fatalf("Open: %d of %d ranks returned within 25s", i, n)
		}
	}
	t.Cleanup(func() {
		for _, d := range dcs {
			if d != nil {
				d.Close()
			}
		}
	})
	return dcs, errs
}

// TestOpenInProcess opens a 2-rank group through a store (named segment in
// a temporary directory, default prefix) and checks an all-reduce and a
// broadcast on CPU buffers.
func TestOpenInProcess(t *testing.T) {
	dir := t.TempDir()
	o := Options{ChunkBytes: 64 << 10, Slots: 3, Workers: 1, HostHeapBytes: -1, Dir: dir}
	o.Timeout = 10 * time.Second
	dcs, errs := openRanks(t, 2, o, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("segment names left after Open: %v", left)
	}
	res := make(chan error, 2)
	for r, d := range dcs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			x := []float32{float32(r + 1), 10}
			b := cpu.WrapF32(x)
			err := d.AllReduce(ctx, b, comm.Sum)
			if err == nil {
				err = d.Sync(ctx)
			}
			if err == nil && (x[0] != 3 || x[1] != 20) {
				err = fmt.Errorf("rank %d: sum %v, want [3 20]", r, x)
			}
			y := []int64{int64(r * 7)}
			if err == nil {
				err = d.Broadcast(ctx, cpu.WrapI64(y), 1)
			}
			if err == nil && y[0] != 7 {
				err = fmt.Errorf("rank %d: broadcast %v, want [7]", r, y)
			}
			res <- err
		}()
	}
	for range dcs {
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("collectives did not return within 15s")
		}
	}
	if dcs[0].Kind() != comm.KindGPUShm {
		t.Fatalf("Kind = %q", dcs[0].Kind())
	}
}

// TestOpenErrors: invalid options, a segment directory that does not
// exist, and a segment path outside the directory published under the
// key are refused with the reason.
func TestOpenErrors(t *testing.T) {
	_, errs := openRanks(t, 1, Options{Slots: 1}, nil)
	var oe *OptionError
	if !errors.As(errs[0], &oe) || oe.Field != "Slots" || errs[0].Error() != "gpushm: Slots 1: want "+oe.Want {
		t.Fatalf("Slots 1: %v", errs[0])
	}
	_, errs = openRanks(t, 1, Options{Dir: filepath.Join(t.TempDir(), "missing")}, nil)
	if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), "gpushm: creating the segment: ") {
		t.Fatalf("missing directory: %v", errs[0])
	}
	// Rank 1 alone, with a bogus path already published by "rank 0".
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stores := rendezvous.NewLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stores[0].Set(ctx, "p/segment", []byte("/etc/passwd")); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, stores[1], be, Options{Prefix: "p", Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `gpushm rank 1: rank 0 published an unexpected segment path "/etc/passwd"`) {
		t.Fatalf("bogus segment path: %v", err)
	}
	dir := t.TempDir()
	if err := stores[0].Set(ctx, "q/segment", []byte(filepath.Join(dir, "strata-gpushm-gone"))); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, stores[1], be, Options{Prefix: "q", Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "(are all ranks on one host?)") {
		t.Fatalf("vanished segment: %v", err)
	}
}

// TestTracerReport: the tracer's means per phase, "-" where nothing was
// measured.
func TestTracerReport(t *testing.T) {
	tr := &tracer{rank: 1, path: "off: test"}
	var b bytes.Buffer
	tr.report(&b)
	want := "gpushm trace rank 1: device path off: test; pipeline ops=0 host_us first_in=- all_in=- all_reduced=- end=- " +
		"gpu_us began=- first_in=- last_out=- late_us first_in=- end=-; device ops=0 host_us queue=- wait=- gpu_us start=- end=- op=- late_us=-; naps=0 nap_us=-\n"
	if b.String() != want {
		t.Fatalf("empty report:\n%q\nwant\n%q", b.String(), want)
	}
	t0 := time.Unix(100, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	tr.pipeOp(nil, pipeTimes{start: t0}) // failed: not counted
	tr.pipeOp(nil, pipeTimes{start: t0, firstIn: us(10), allIn: us(20), allRed: us(30), end: us(40)})
	tr.pipeOp(nil, pipeTimes{start: t0, firstIn: us(30), allIn: us(40), allRed: us(50), end: us(60)})
	tr.nap(3 * time.Microsecond)
	tr.nap(5 * time.Microsecond)
	st := newEmuStream()
	defer st.stop()
	tr.devOp(st, &pendOp{op: &devOp{ticket: 1}, start: t0, queued: us(4)}, us(10))
	b.Reset()
	tr.report(&b)
	for _, part := range []string{"pipeline ops=2 host_us first_in=20.0 all_in=30.0 all_reduced=40.0 end=50.0",
		"device ops=1 host_us queue=4.0 wait=6.0 gpu_us start=- end=-", "naps=2 nap_us=4.0"} {
		if !strings.Contains(b.String(), part) {
			t.Fatalf("report %q lacks %q", b.String(), part)
		}
	}
}
