package commbench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// small is a benchmark configuration of three sizes and few iterations.
func small() Config {
	return Config{MinBytes: 1 << 10, MaxBytes: 16 << 10, Budget: 1 << 14, MinIters: 1, MaxIters: 4, Repeats: 1, Timeout: 10 * time.Second}
}

// checkPoints checks the sizes, iteration counts and bandwidth of points
// measured with small() on n ranks.
func checkPoints(t *testing.T, what string, pts []Point, op comm.Op, n int) {
	t.Helper()
	if len(pts) != 3 {
		t.Fatalf("%s: %d points, want 3", what, len(pts))
	}
	for i, p := range pts {
		want := int64(1<<10) << (2 * i)
		iters := int(min(max((1<<14)/want, 1), 4))
		if p.Bytes != want || p.Iters != iters || p.Seconds <= 0 || p.AlgBW <= 0 || p.BusBW != p.AlgBW*busFactor(op, n) {
			t.Fatalf("%s point %d: %+v, want %d bytes, %d iterations", what, i, p, want, iters)
		}
	}
}

// onRanks runs f on n goroutine ranks and returns the first error, with a
// 30 s deadline.
func onRanks(t *testing.T, n int, f func(ctx context.Context, r int) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for r := 0; r < n; r++ {
		go func() { errs <- f(ctx, r) }()
	}
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(35 * time.Second):
			t.Fatalf("%d of %d ranks returned within 35s", i, n)
		}
	}
}

// TestMeasureDeviceStaged measures every operation with MeasureDevice on
// CPU buffers staged through a 2-rank inproc group.
func TestMeasureDeviceStaged(t *testing.T) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	for _, name := range []string{"all_reduce", "broadcast", "all_gather", "all_to_all", "reduce_scatter"} {
		op, err := parseOp(name)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := inproc.New(n, comm.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		pts := make([][]Point, n)
		onRanks(t, n, func(ctx context.Context, r int) error {
			dc := staged.Open(hs[r], be, comm.Options{Timeout: 10 * time.Second})
			defer dc.Close()
			var err error
			pts[r], err = MeasureDevice(ctx, dc, be, small(), op)
			return err
		})
		checkPoints(t, name, pts[0], op, n)
		if pts[1][2].Seconds != pts[0][2].Seconds {
			t.Fatalf("%s: ranks disagree on the slowest time: %v vs %v", name, pts[0][2].Seconds, pts[1][2].Seconds)
		}
	}
	if _, err := MeasureDevice(context.Background(), nil, be, Config{Repeats: -1}, comm.OpAllReduce); err == nil {
		t.Fatal("MeasureDevice accepted -1 repeats")
	}
}

// TestMeasure: the exported Measure (buffers from Comm.Alloc) on a 3-rank
// inproc group, and its configuration check.
func TestMeasure(t *testing.T) {
	const n = 3
	cs, err := inproc.New(n, comm.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pts := make([][]Point, n)
	onRanks(t, n, func(ctx context.Context, r int) error {
		defer cs[r].Close()
		var err error
		pts[r], err = Measure(ctx, cs[r], small(), comm.OpReduceScatter)
		return err
	})
	checkPoints(t, "reduce_scatter", pts[2], comm.OpReduceScatter, n)
	if _, err := Measure(context.Background(), cs[0], Config{MinBytes: 4}, comm.OpAllReduce); err == nil || !strings.Contains(err.Error(), "sizes 4..") {
		t.Fatalf("Measure with 4-byte minimum: %v", err)
	}
	if _, _, err := prepare(cs[0], comm.OpBarrier, 64, true); err == nil || err.Error() != "commbench: op barrier" {
		t.Fatalf("prepare(barrier): %v", err)
	}
}

// TestChildMainInProcess runs ChildMain in this process as the only rank
// of a host (inproc) and a device (gpushm on the CPU back end) job and
// checks the series rank 0 writes; a malformed job is an error naming
// the variable.
func TestChildMainInProcess(t *testing.T) {
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port),
		"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", DeviceEnv: "cpu"} {
		t.Setenv(k, v)
	}
	for _, tc := range []struct{ kind, chosen string }{{"inproc", "inproc"}, {"gpushm", "gpushm"}} {
		res := filepath.Join(t.TempDir(), "series.json")
		job, err := json.Marshal(child{Config: small(), Kind: tc.kind, Result: res})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(ChildEnv, string(job))
		if !IsChild() {
			t.Fatal("IsChild is false with the job set")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = ChildMain(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.kind, err)
		}
		b, err := os.ReadFile(res)
		if err != nil {
			t.Fatal(err)
		}
		var s Series
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.Backend != tc.kind || s.Chosen != tc.chosen {
			t.Fatalf("%s: series %s chose %q", tc.kind, s.Backend, s.Chosen)
		}
		if tc.kind == "gpushm" && (s.GPUShm == nil || s.Reason == "") {
			t.Fatalf("gpushm series without its settings or reason: %+v", s)
		}
		checkPoints(t, tc.kind, s.Points, comm.OpAllReduce, 1)
	}

	t.Setenv(ChildEnv, "{not json")
	if err := ChildMain(context.Background()); err == nil || !strings.Contains(err.Error(), "bad "+ChildEnv) {
		t.Fatalf("malformed job: %v", err)
	}
	bad, _ := json.Marshal(child{Config: Config{Procs: -1}, Kind: "inproc"})
	t.Setenv(ChildEnv, string(bad))
	if err := ChildMain(context.Background()); err == nil || err.Error() != "commbench: -1 ranks" {
		t.Fatalf("job with -1 ranks: %v", err)
	}
}

// TestRunProcsFailure: a child program that fails makes the series carry
// the error (first line in the table) instead of failing the run.
func TestRunProcsFailure(t *testing.T) {
	var log bytes.Buffer
	rep, err := Run(context.Background(), Config{Backends: []string{"shm"}, Procs: 2, MinBytes: 1 << 10, MaxBytes: 1 << 10,
		Self: []string{"/bin/false"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Series[0]
	if s.Error == "" || len(s.Points) != 0 || !strings.Contains(log.String(), "commbench: shm failed: ") {
		t.Fatalf("series %+v, log %q", s, log.String())
	}
	var tab bytes.Buffer
	rep.WriteTable(&tab)
	if want := "shm failed: " + firstLine(s.Error) + "\n"; !strings.HasSuffix(tab.String(), want) {
		t.Fatalf("table %q does not end with %q", tab.String(), want)
	}
}

// TestWriteTableShapes: auto shows what it chose, a series with fewer
// points shows "-", and sizes print in human units.
func TestWriteTableShapes(t *testing.T) {
	rep := &Report{Op: "all_reduce", Procs: 2, DType: "float32", Series: []Series{
		{Backend: "auto", Chosen: "shm", Points: []Point{{Bytes: 1536, BusBW: 1}, {Bytes: 3 << 20, BusBW: 2}}},
		{Backend: "tcp", Points: []Point{{Bytes: 1536, BusBW: 0.5}}, Error: "line one\nline two"},
	}}
	var b bytes.Buffer
	rep.WriteTable(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 5 || !strings.Contains(lines[1], "auto=shm") || strings.Contains(lines[1], "shm/tcp") ||
		!strings.HasPrefix(lines[2], "   1.5 KiB") || !strings.HasPrefix(lines[3], "     3 MiB") || !strings.HasSuffix(lines[3], "-") ||
		lines[4] != "tcp failed: line one" {
		t.Fatalf("table:\n%s", b.String())
	}
	for in, want := range map[int64]string{100: "100 B", 2048: "2 KiB", 1536: "1.5 KiB", 5 << 20: "5 MiB", 3 << 19: "1.5 MiB", 2 << 30: "2 GiB", 3<<30 + 1<<20: "3073 MiB"} {
		if got := human(in); got != want {
			t.Errorf("human(%d) = %q, want %q", in, got, want)
		}
	}
	if firstLine("a") != "a" {
		t.Error(`firstLine("a")`)
	}
}
