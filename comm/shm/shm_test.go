//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/shm"
)

// Small slots so the conformance lengths stream through many chunks and
// reuse every slot.
func group(reducer string) commtest.NewGroup {
	return func(n int, o comm.Options) ([]comm.Comm, error) {
		return shm.NewLocal(n, shm.Options{Options: o, SlotBytes: 4096, Reducer: reducer, HeapBytes: 4 << 20})
	}
}

// The suites run on CPU back-end buffers (the nil back end).
func TestConformance(t *testing.T)       { commtest.Conformance(t, nil, group("goroutine")) }
func TestConformanceInline(t *testing.T) { commtest.Conformance(t, nil, group("inline")) }
func TestConformanceAlloc(t *testing.T)  { commtest.ConformanceAlloc(t, nil, group("")) }
func TestFaults(t *testing.T)            { commtest.Faults(t, nil, group(""), nil) }

func TestMain(m *testing.M) {
	commtest.Main(m, map[string]func() error{
		// A child attached to the memfd its parent passed as fd 3.
		"memfd": func() error {
			e, err := rendezvous.FromEnv()
			if err != nil {
				return err
			}
			c, err := shm.Attach(context.Background(), os.NewFile(3, "segment"), e.Rank, e.WorldSize,
				shm.Options{Options: comm.Options{Timeout: 20 * time.Second}, SlotBytes: 8192})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := commtest.RunProgram(context.Background(), c, nil, []int{0, 5, 3001}, 7); err != nil {
				return err
			}
			fmt.Println("ok")
			return nil
		},
	})
}

// TestMemfdProcesses: the parent creates the segment and hands it to three
// processes through ExtraFiles; they run the conformance program.
func TestMemfdProcesses(t *testing.T) {
	f, err := shm.CreateFile(3, shm.Options{SlotBytes: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	_, err = launch.Run(context.Background(), launch.Config{N: 3, Command: commtest.Command(), Env: []string{commtest.RoleEnv + "=memfd"},
		ExtraFiles: []*os.File{f}, Stdout: &out, Stderr: &out})
	if err != nil || strings.Count(out.String(), "ok") != 3 {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

func TestAttachErrors(t *testing.T) {
	f, err := shm.CreateFile(2, shm.Options{SlotBytes: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// Wrong world size, bad rank.
	if _, err := shm.Attach(ctx, f, 0, 3, shm.Options{}); err == nil || !strings.Contains(err.Error(), "2 ranks") {
		t.Errorf("wrong world size: %v", err)
	}
	if _, err := shm.Attach(ctx, f, 2, 2, shm.Options{}); err == nil {
		t.Error("rank out of range accepted")
	}
	// Rank 1 never attaches: rank 0 fails at the deadline naming it.
	if _, err := shm.Attach(ctx, f, 0, 2, shm.Options{}); err == nil || !strings.Contains(err.Error(), "[1]") {
		t.Errorf("missing rank: %v", err)
	}
	// A rank cannot attach twice.
	if _, err := shm.Attach(ctx, f, 0, 2, shm.Options{}); err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Errorf("duplicate rank: %v", err)
	}
	// Not a segment.
	g, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	g.Write(make([]byte, 8192))
	if _, err := shm.Attach(ctx, g, 0, 2, shm.Options{}); err == nil || !strings.Contains(err.Error(), "not a Strata segment") {
		t.Errorf("plain file: %v", err)
	}
	// Bad layouts.
	for _, o := range []shm.Options{{SlotBytes: 1000}, {SlotBytes: 1 << 30}, {Slots: 1}} {
		if _, err := shm.CreateFile(2, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func BenchmarkAllReduce(b *testing.B) {
	heap := func(n int, o comm.Options) ([]comm.Comm, error) {
		return shm.NewLocal(n, shm.Options{Options: o, HeapBytes: 64 << 20})
	}
	commtest.BenchmarkAllReduce(b, heap, 2, 64<<10, 1<<20, 16<<20)
}

// TestNoRoomForHeap: when the heap does not fit, New falls back to a
// segment without one (Alloc then uses the Go heap), and the group works.
func TestNoRoomForHeap(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	stores := rendezvous.NewLocal(2)
	cs := make([]comm.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// 1 TiB per rank: more than any test machine's memory.
			cs[r], errs[r] = shm.New(ctx, stores[r], shm.Options{HeapBytes: 1 << 40})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for _, err := range commtest.OnAll(cs, func(c comm.Comm) error {
		return commtest.RunCase(context.Background(), c, nil, commtest.Case{Op: comm.OpAllReduce, DType: commtest.DTypes[0], Red: comm.Sum, Len: 40000, Seed: 3, Alloc: true})
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// CreateFile has no fallback: it reports the problem.
	if _, err := shm.CreateFile(2, shm.Options{HeapBytes: 1 << 40}); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("CreateFile with a 1 TiB heap: %v", err)
	}
}

// BenchmarkAllReduceSlots streams through the slots (no shared heap):
// the path whose flags carry the slot headers.
func BenchmarkAllReduceSlots(b *testing.B) {
	slots := func(n int, o comm.Options) ([]comm.Comm, error) {
		return shm.NewLocal(n, shm.Options{Options: o})
	}
	commtest.BenchmarkAllReduce(b, slots, 2, 4<<10, 64<<10, 1<<20, 16<<20)
}
