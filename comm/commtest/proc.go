package commtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend"
)

// RoleEnv selects a child role when a test binary re-executes itself.
const RoleEnv = "STRATA_COMMTEST_ROLE"

// Main is called from a test package's TestMain. In a child process
// (RoleEnv set) it runs that role and exits: status 0 if the role returns
// nil, 1 after printing its error otherwise. Otherwise it runs the tests.
func Main(m *testing.M, roles map[string]func() error) {
	if role := os.Getenv(RoleEnv); role != "" {
		f := roles[role]
		if f == nil {
			fmt.Fprintf(os.Stderr, "commtest: unknown role %q\n", role)
			os.Exit(2)
		}
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "role %s rank %s: %v\n", role, os.Getenv("RANK"), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Command is the argv that re-executes the running test binary without
// running any test (TestMain then dispatches on RoleEnv).
func Command() []string { return []string{os.Args[0], "-test.run=^$"} }

// Job is what one process of a multi-process test runs (one process per
// GPU, or per rank of a host back end): see RunJob and Launch.
type Job struct {
	// Open opens this rank's communicator of a new group; prefix is
	// unique per group (use it to namespace store keys).
	Open func(ctx context.Context, store rendezvous.Store, prefix string, o comm.Options) (comm.Comm, error)
	// Backend holds this rank's buffers (nil: the CPU back end).
	Backend backend.Backend
	// Lens for the conformance suite (DeviceLens() if nil).
	Lens []int
	// Conformance and Faults pick the suites.
	Conformance, Faults bool
	// Skip: see Env.
	Skip map[string]string
}

// RunJob joins the job's store from the environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) and runs the suites, printing one line per
// suite on success ("rank R: conformance ok").
func RunJob(ctx context.Context, j Job) error {
	env, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	store, err := rendezvous.Join(jctx, env, rendezvous.Options{})
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	groups := 0
	within := func(f func(ctx context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return f(c)
	}
	e := Env{Rank: env.Rank, Size: env.WorldSize, Backend: j.Backend, Skip: j.Skip,
		Open: func(o comm.Options) (c comm.Comm, err error) {
			groups++
			err = within(func(ctx context.Context) error {
				c, err = j.Open(ctx, store, fmt.Sprintf("commtest/%d", groups), o)
				return err
			})
			return c, err
		},
		Barrier: func(name string) error {
			return within(func(ctx context.Context) error { return store.Barrier(ctx, name) })
		},
		Add: func(name string, delta int64) (v int64, err error) {
			err = within(func(ctx context.Context) error {
				v, err = store.Add(ctx, name, delta)
				return err
			})
			return v, err
		},
		Logf: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) },
	}
	if j.Conformance {
		lens := j.Lens
		if lens == nil {
			lens = DeviceLens()
		}
		if err := RankConformance(ctx, e, lens, false); err != nil {
			return fmt.Errorf("conformance: %w", err)
		}
		fmt.Printf("rank %d: conformance ok\n", env.Rank)
	}
	if j.Faults {
		if err := RankFaults(ctx, e); err != nil {
			return err
		}
		fmt.Printf("rank %d: faults ok\n", env.Rank)
	}
	// Rank 0 serves the store: leave together.
	return within(func(ctx context.Context) error { return store.Barrier(ctx, "commtest/end") })
}

// Launch re-executes the test binary as n processes in role (see Main),
// with extra environment entries, and returns their combined output; it
// fails unless every process exits cleanly and reports each expected
// suite ("conformance", "faults").
func Launch(ctx context.Context, n int, role string, env []string, suites ...string) (string, error) {
	var out strings.Builder
	_, err := launch.Run(ctx, launch.Config{N: n, Command: Command(), Env: append([]string{RoleEnv + "=" + role}, env...),
		Stdout: &out, Stderr: &out, Prefix: true})
	s := out.String()
	if err != nil {
		return s, err
	}
	for _, suite := range suites {
		if k := strings.Count(s, ": "+suite+" ok"); k != n {
			return s, fmt.Errorf("%d of %d ranks reported %s ok", k, n, suite)
		}
	}
	return s, nil
}
