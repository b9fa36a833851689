package commtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend"
)

// DeviceJob is what one process of a multi-process device test runs
// (one process per GPU): see RunDeviceJob and LaunchDevice.
type DeviceJob struct {
	// Open opens this rank's communicator of a new group; prefix is
	// unique per group (use it to namespace store keys).
	Open func(ctx context.Context, store rendezvous.Store, prefix string, o comm.Options) (comm.DeviceComm, error)
	// Backend holds this rank's buffers.
	Backend backend.Backend
	// Exact: float sums are in rank order (see DeviceEnv).
	Exact bool
	// Lens for the conformance suite (DeviceLens() if nil).
	Lens []int
	// Conformance and Faults pick the suites.
	Conformance, Faults bool
	// UncheckedCounts: see DeviceEnv.
	UncheckedCounts string
}

// RunDeviceJob joins the job's store from the environment (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs the suites, printing one
// line per suite on success ("rank R: conformance ok").
func RunDeviceJob(ctx context.Context, j DeviceJob) error {
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
	e := DeviceEnv{Rank: env.Rank, Size: env.WorldSize, Backend: j.Backend, Exact: j.Exact, UncheckedCounts: j.UncheckedCounts,
		Open: func(o comm.Options) (comm.DeviceComm, error) {
			groups++
			octx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return j.Open(octx, store, fmt.Sprintf("devtest/%d", groups), o)
		},
		Barrier: func(name string) error {
			bctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return store.Barrier(bctx, name)
		},
		Logf: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) },
	}
	if j.Conformance {
		lens := j.Lens
		if lens == nil {
			lens = DeviceLens()
		}
		if err := DeviceConformance(ctx, e, lens); err != nil {
			return fmt.Errorf("conformance: %w", err)
		}
		fmt.Printf("rank %d: conformance ok\n", env.Rank)
	}
	if j.Faults {
		if err := DeviceFaults(ctx, e); err != nil {
			return err
		}
		fmt.Printf("rank %d: faults ok\n", env.Rank)
	}
	// Rank 0 serves the store: leave together.
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return store.Barrier(bctx, "devtest/end")
}

// LaunchDevice re-executes the test binary as n processes in role (see
// Main), with extra environment entries, and returns their combined
// output; it fails unless every process exits cleanly and reports each
// expected suite ("conformance", "faults").
func LaunchDevice(ctx context.Context, n int, role string, env []string, suites ...string) (string, error) {
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
