package dist_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/dist"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Child roles. The back end comes from STRATA_TEST_COMM.
func TestMain(m *testing.M) {
	commtest.Main(m, map[string]func() error{
		"conformance": func() error {
			c, info, err := open(30 * time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			if info.Kind != os.Getenv("STRATA_TEST_COMM") || !info.SameHost {
				return fmt.Errorf("opened %+v", info)
			}
			lens := []int{0, 1, 7, 1000, 70001}
			if os.Getenv("STRATA_TEST_SHORT") != "" {
				lens = []int{0, 7, 20011}
			}
			start := time.Now()
			if err := commtest.RunProgram(context.Background(), c, nil, lens, 42); err != nil {
				return err
			}
			fmt.Printf("ok: %d cases on %s in %v\n", len(lens)*len(commtest.Cases(0, 0)), info.Kind, time.Since(start))
			return nil
		},
		"exit": func() error {
			// Rank 2 dies without closing anything; the others must fail
			// promptly (well before their 20 s timeout) naming it.
			c, _, err := open(20 * time.Second)
			if err != nil {
				return err
			}
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			if c.Rank() == 2 {
				os.Exit(7)
			}
			start := time.Now()
			x := make([]float32, 1<<16)
			err = c.AllReduce(context.Background(), cpu.WrapF32(x), comm.Sum)
			if e := commtest.CheckOpError(err, comm.OpAllReduce, 2, []int{2}, nil); e != nil {
				return e
			}
			if el := time.Since(start); el > 5*time.Second {
				return fmt.Errorf("noticed the exit after %v", el)
			}
			fmt.Println("ok:", err)
			return nil
		},
		"stall": func() error {
			// Rank 2 stalls past the 1 s deadline; the others fail within
			// it naming rank 2; rank 2's late call fails at once.
			d := time.Second
			c, _, err := open(d)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			x := make([]float32, 1<<16)
			start := time.Now()
			if c.Rank() == 2 {
				time.Sleep(d + 1500*time.Millisecond)
				start = time.Now()
				err := c.AllReduce(context.Background(), cpu.WrapF32(x), comm.Sum)
				if !errors.As(err, new(*comm.OpError)) {
					return fmt.Errorf("late call: %v", err)
				}
				if el := time.Since(start); el > d/2 {
					return fmt.Errorf("late call took %v", el)
				}
				fmt.Println("ok:", err)
				return nil
			}
			err = c.AllReduce(context.Background(), cpu.WrapF32(x), comm.Sum)
			if e := commtest.CheckOpError(err, comm.OpAllReduce, 2, []int{2}, nil); e != nil {
				return e
			}
			if el := time.Since(start); el > d+commtest.Slack {
				return fmt.Errorf("returned after %v, deadline %v", el, d)
			}
			fmt.Println("ok:", err)
			return nil
		},
	})
}

func open(timeout time.Duration) (comm.Comm, dist.Info, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return dist.Init(ctx, dist.Options{Backend: os.Getenv("STRATA_TEST_COMM"), Comm: comm.Options{Timeout: timeout},
		ShmSlotBytes: 16 << 10, TCPSegmentBytes: 8 << 10})
}

func run(t *testing.T, kind, role string, n int, keepGoing bool) ([]launch.Result, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := []string{commtest.RoleEnv + "=" + role, "STRATA_TEST_COMM=" + kind}
	if testing.Short() {
		env = append(env, "STRATA_TEST_SHORT=1")
	}
	res, err := launch.Run(ctx, launch.Config{N: n, Command: commtest.Command(), Prefix: true, Stdout: &out, Stderr: &errOut,
		Env: env, KeepGoing: keepGoing})
	return res, out.String() + errOut.String(), err
}

var backends = []string{comm.KindShm, comm.KindTCP}

func TestMultiProcessConformance(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			n := 3
			if testing.Short() {
				n = 2
			}
			_, out, err := run(t, kind, "conformance", n, false)
			if err != nil || strings.Count(out, "ok:") != n {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Log(out)
		})
	}
}

func TestMultiProcessExit(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			res, out, err := run(t, kind, "exit", 3, true)
			var ee *launch.ExitError
			if !errors.As(err, &ee) || ee.Rank != 2 || !strings.Contains(err.Error(), "exit status 7") {
				t.Fatalf("want rank 2's exit reported, got %v\n%s", err, out)
			}
			for r := 0; r < 2; r++ {
				if res[r].Err != nil {
					t.Errorf("survivor rank %d: %v\n%s", r, res[r].Err, out)
				}
			}
			if strings.Count(out, "ok:") != 2 {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

func TestMultiProcessStall(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			if _, out, err := run(t, kind, "stall", 3, false); err != nil || strings.Count(out, "ok:") != 3 {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
