package commcli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/internal/sysmem"
)

// TestLaunchValidate: each out-of-range flag is refused with one line
// naming it and the range.
func TestLaunchValidate(t *testing.T) {
	ok := LaunchCmd{N: 2, MasterPort: 0, Grace: 5 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	tests := []struct {
		edit func(c *LaunchCmd)
		want string
	}{
		{func(c *LaunchCmd) { c.N = 0 }, fmt.Sprintf("-n 0: want 1..%d", launch.MaxProcs)},
		{func(c *LaunchCmd) { c.MasterPort = 65536 }, "--master-port 65536: want 0..65535"},
		{func(c *LaunchCmd) { c.Grace = -time.Second }, "--grace -1s: want a duration in 0s..1h0m0s"},
		{func(c *LaunchCmd) { c.Grace = 2 * time.Hour }, "--grace 2h0m0s: want a duration in 0s..1h0m0s"},
	}
	for _, tc := range tests {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// TestBenchCommValidate: the ranges of 'strata bench comm' and the
// memory check.
func TestBenchCommValidate(t *testing.T) {
	ok := BenchCommCmd{Procs: 2, MinBytes: 4096, MaxBytes: 1 << 20, Factor: 4, Repeats: 3, Budget: 1 << 20, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	tests := []struct {
		edit func(c *BenchCommCmd)
		want string
	}{
		{func(c *BenchCommCmd) { c.Procs = 0 }, fmt.Sprintf("--procs 0: want 1..%d", launch.MaxProcs)},
		{func(c *BenchCommCmd) { c.MinBytes = 4 }, "--min-bytes 4: want 8..17179869184"},
		{func(c *BenchCommCmd) { c.MaxBytes = 1024 }, "--max-bytes 1024: want 4096..17179869184"},
		{func(c *BenchCommCmd) { c.Factor = 1 }, "--factor 1: want 2..1024"},
		{func(c *BenchCommCmd) { c.Repeats = 1001 }, "--repeats 1001: want 1..1000"},
		{func(c *BenchCommCmd) { c.Budget = 0 }, "--budget 0: want 1..1099511627776"},
		{func(c *BenchCommCmd) { c.Timeout = 0 }, "--timeout 0s: want a positive duration, at most 24h0m0s"},
		{func(c *BenchCommCmd) { c.Timeout = 25 * time.Hour }, "--timeout 25h0m0s: want a positive duration, at most 24h0m0s"},
	}
	for _, tc := range tests {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	big := ok
	big.Procs, big.MaxBytes = launch.MaxProcs, 16<<30
	need := float64(big.Procs) * 2 * float64(big.MaxBytes)
	if b, avail := sysmem.Available(); avail && need > float64(b.Bytes) {
		err := big.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("--max-bytes %d: %d ranks with two buffers each need about", big.MaxBytes, big.Procs)) {
			t.Errorf("buffers beyond the available memory: %v", err)
		}
	}
}

// TestGPUShmFlagsSet names the flags given non-default values, in
// struct order.
func TestGPUShmFlagsSet(t *testing.T) {
	if s := (GPUShmFlags{}).Set(); len(s) != 0 {
		t.Fatalf("no flags: %v", s)
	}
	f := GPUShmFlags{Idle: "gosleep", Slots: 4, DeviceMax: -1, Async: true}
	want := []string{"gpushm-slots", "gpushm-device-max", "gpushm-async", "gpushm-idle"}
	if s := f.Set(); !slices.Equal(s, want) {
		t.Fatalf("Set() = %v, want %v", s, want)
	}
	all := GPUShmFlags{ChunkBytes: 1, Slots: 1, Workers: 1, Chunks: 1, DeviceMax: 1, DeviceChunk: 1, Async: true, Idle: "x"}
	if s := all.Set(); len(s) != 8 || s[0] != "gpushm-chunk-bytes" || s[7] != "gpushm-idle" {
		t.Fatalf("all flags: %v", s)
	}
}

// TestLaunchWithoutCommand: 'strata launch -n 2 --' with nothing after
// the separator says what to give.
func TestLaunchWithoutCommand(t *testing.T) {
	for _, cmd := range [][]string{nil, {"--"}} {
		c := LaunchCmd{N: 2, Command: cmd}
		if err := c.Run(); err == nil || !strings.HasPrefix(err.Error(), "launch: give the command after --") {
			t.Fatalf("command %q: %v", cmd, err)
		}
	}
}

// TestBenchCommRunErrors: a bad STRATA_NCCL_ASYNC, an invalid
// configuration, an unwritable JSON path and a failing back end each make
// Run fail with the cause.
func TestBenchCommRunErrors(t *testing.T) {
	for _, k := range append(gpushm.EnvNames, nccl.EnvAsync) {
		t.Setenv(k, "")
	}
	base := BenchCommCmd{Comm: []string{"inproc"}, Procs: 2, Op: "all_reduce", MinBytes: 1024, MaxBytes: 1024, Factor: 4,
		Repeats: 1, Budget: 1024, Timeout: 10 * time.Second}
	var out bytes.Buffer

	t.Setenv(nccl.EnvAsync, "maybe")
	c := base
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err == nil || !strings.HasPrefix(err.Error(), "environment: ") || !strings.Contains(err.Error(), nccl.EnvAsync) {
		t.Fatalf("bad %s: %v", nccl.EnvAsync, err)
	}
	t.Setenv(nccl.EnvAsync, "")

	c = base
	c.Stdout, c.Stderr, c.Factor = &out, &out, 1
	if err := c.Run(); err == nil || !strings.HasPrefix(err.Error(), "commbench: sizes") {
		t.Fatalf("factor 1: %v", err)
	}

	c = base
	c.Stdout, c.Stderr = &out, &out
	c.JSON = filepath.Join(t.TempDir(), "missing", "bench.json")
	if err := c.Run(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("JSON in a missing directory: %v", err)
	}

	// The ranks of shm re-execute os.Args: make that a program that fails.
	saved := os.Args
	os.Args = []string{"/bin/false"}
	defer func() { os.Args = saved }()
	c = base
	out.Reset()
	c.Stdout, c.Stderr, c.Comm = &out, &out, []string{" shm, ", ""}
	c.JSON = filepath.Join(t.TempDir(), "bench.json")
	if err := c.Run(); err == nil || err.Error() != "bench comm: shm failed" {
		t.Fatalf("failing ranks: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "wrote "+c.JSON) || !strings.Contains(out.String(), "shm failed: ") {
		t.Fatalf("output:\n%s", out.String())
	}
}
