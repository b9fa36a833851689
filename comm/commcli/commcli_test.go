package commcli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/strata-gnn/strata/comm/commbench"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// cli mirrors how cmd/strata wires the commands.
type cli struct {
	Launch LaunchCmd `cmd:""`
	Bench  struct {
		Comm BenchCommCmd `cmd:""`
	} `cmd:""`
}

func parse(t *testing.T, args ...string) (*kong.Context, *cli) {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := p.Parse(args)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, &c
}

func TestMain(m *testing.M) {
	// A bench rank re-executes the test binary with the bench flags.
	if commbench.IsChild() {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		var c cli
		p, _ := kong.New(&c)
		ctx, err := p.Parse(args)
		if err == nil {
			err = ctx.Run()
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	commtest.Main(m, map[string]func() error{
		"hello": func() error {
			e, err := rendezvous.FromEnv()
			if err != nil {
				return err
			}
			os.Stdout.WriteString("hello from " + e.Addr() + "\n")
			if e.Rank == 1 && os.Getenv("FAIL") != "" {
				os.Exit(4)
			}
			return nil
		},
	})
}

func TestLaunch(t *testing.T) {
	var out bytes.Buffer
	ctx, c := parse(t, append([]string{"launch", "-n", "3", "--"}, commtest.Command()...)...)
	c.Launch.Stdout, c.Launch.Stderr = &out, &out
	t.Setenv(commtest.RoleEnv, "hello")
	if err := ctx.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Count(out.String(), "] hello from 127.0.0.1:") != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Setenv("FAIL", "1")
	out.Reset()
	if err := ctx.Run(); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("want rank 1's failure, got %v\n%s", err, out.String())
	}
}

func TestBenchComm(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "bench.json")
	// The ranks re-execute os.Args: make that this test binary followed by
	// the bench command line.
	args := []string{"bench", "comm", "--comm", "inproc,shm,tcp", "--min-bytes", "4096", "--max-bytes", "65536",
		"--repeats", "1", "--budget", "262144", "--json", js}
	saved := os.Args
	os.Args = append([]string{saved[0], "-test.run=^$", "--"}, args...)
	defer func() { os.Args = saved }()
	ctx, c := parse(t, args...)
	var out bytes.Buffer
	c.Bench.Comm.Stdout, c.Bench.Comm.Stderr = &out, &out
	if err := ctx.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "shm/tcp") || !strings.Contains(out.String(), "64 KiB") {
		t.Fatalf("output:\n%s", out.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep commbench.Report
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Series) != 3 || len(rep.Series[1].Points) != 3 {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
}

// TestBenchCommDeviceFlags: the gpushm flags and --nccl-async reach
// commbench.Config (what the ranks get), a STRATA_GPUSHM_* variable fills
// only a field its flag leaves unset and is announced, and a bad value is
// refused naming the flag or the variable.
func TestBenchCommDeviceFlags(t *testing.T) {
	for _, k := range append(gpushm.EnvNames, nccl.EnvAsync) {
		t.Setenv(k, "")
	}
	t.Setenv(gpushm.EnvSlots, "16")
	t.Setenv(gpushm.EnvWorkers, "3")
	_, c := parse(t, "bench", "comm", "--comm", "gpushm", "--gpushm-slots", "4", "--gpushm-chunk-bytes", "8388608",
		"--gpushm-chunks", "2", "--gpushm-device-max=-1", "--gpushm-device-chunk", "1048576", "--gpushm-async",
		"--gpushm-idle", "gosleep", "--nccl-async")
	var cfg commbench.Config
	var note bytes.Buffer
	if err := c.Bench.Comm.deviceSettings(&cfg, &note); err != nil {
		t.Fatal(err)
	}
	want := gpushm.Options{ChunkBytes: 8 << 20, Slots: 4, Workers: 3, Chunks: 2, DeviceMax: -1, DeviceChunk: 1 << 20, Async: true, Idle: gpushm.IdleGoSleep}
	if cfg.GPUShm != want || !cfg.NCCLAsync {
		t.Errorf("settings %+v (nccl async %v), want %+v", cfg.GPUShm, cfg.NCCLAsync, want)
	}
	if n := note.String(); !strings.Contains(n, gpushm.EnvWorkers+"=3") || !strings.Contains(n, gpushm.EnvSlots+"=16") {
		t.Errorf("notice %q does not name the variables set", n)
	}
	// No flags: the environment alone (STRATA_NCCL_ASYNC too).
	t.Setenv(nccl.EnvAsync, "1")
	_, c = parse(t, "bench", "comm")
	cfg = commbench.Config{}
	if err := c.Bench.Comm.deviceSettings(&cfg, io.Discard); err != nil || cfg.GPUShm.Slots != 16 || !cfg.NCCLAsync {
		t.Errorf("environment only: %+v, %v", cfg, err)
	}
	t.Setenv(gpushm.EnvSlots, "1")
	if err := c.Bench.Comm.deviceSettings(&cfg, io.Discard); err == nil || !strings.Contains(err.Error(), gpushm.EnvSlots) {
		t.Errorf("%s=1: %v, want an error naming it", gpushm.EnvSlots, err)
	}
	for _, args := range [][]string{{"--gpushm-slots", "1"}, {"--gpushm-chunk-bytes", "5000"}, {"--gpushm-idle", "busy"},
		{"--gpushm-workers=-1"}, {"--gpushm-device-chunk", "100"}} {
		var cl cli
		p, err := kong.New(&cl, kong.Exit(func(int) { t.Fatal("kong exited") }))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Parse(append([]string{"bench", "comm"}, args...))
		flag, _, _ := strings.Cut(args[0], "=")
		if err == nil || !strings.Contains(err.Error(), flag+" ") {
			t.Errorf("%v: %v, want an error naming %s", args, err, flag)
		}
	}
}
