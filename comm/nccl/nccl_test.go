package nccl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/internal/cudalib"
	lib "github.com/strata-gnn/strata/internal/nccl"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// openGPU opens CUDA device i (through the back-end registry, which
// internal/cudacomm links the CUDA back end into).
func openGPU(i int) (backend.Backend, error) { return backend.Open(fmt.Sprintf("cuda:%d", i)) }

func closeGPU(be backend.Backend) {
	if c, ok := be.(io.Closer); ok {
		c.Close()
	}
}

func TestMain(m *testing.M) {
	commtest.Main(m, map[string]func() error{
		// One process per GPU (LOCAL_RANK picks it).
		"gpu": func() error {
			lr, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
			dev, err := openGPU(lr)
			if err != nil {
				return err
			}
			defer closeGPU(dev)
			// The launching test picks synchronous or asynchronous
			// operations with STRATA_NCCL_ASYNC (FromEnv).
			no, _, err := FromEnv(Options{})
			if err != nil {
				return err
			}
			return commtest.RunJob(context.Background(), commtest.Job{
				Open: func(ctx context.Context, store rendezvous.Store, prefix string, o comm.Options) (comm.Comm, error) {
					no.Options, no.Prefix = o, prefix
					return Open(ctx, store, dev, no)
				},
				// The fault suite expects each failing call itself to fail;
				// asynchronous calls report a failure at the next call
				// (TestGPUAsyncStall covers that).
				Backend: dev, Conformance: true, Faults: !AsyncFor(no),
				Skip: map[string]string{
					"counts": "NCCL exchanges no header with the data (Debug checks counts)",
					// The host suite's scenario, new to NCCL when the
					// suites merged: enable it once a two-GPU run passes.
					"close-during-op": "not yet checked on NCCL (a rank closed while its all-reduce waits for the peers)",
				},
			})
		},
	})
}

// TestWithoutNCCL: where libnccl is missing, Available says which library
// and where it was looked for.
func TestWithoutNCCL(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skipf("NCCL %s is available", lib.VersionString(lib.Version()))
	}
	if lib.Supported && !strings.Contains(err.Error(), "libnccl") {
		t.Fatalf("Available: %v, want a message naming libnccl", err)
	}
	if lib.Supported && !strings.Contains(err.Error(), cudalib.EnvPath) {
		t.Errorf("Available: %v does not say how to point at the library", err)
	}
}

func TestMappings(t *testing.T) {
	if dtype(backend.Float32) != lib.Float32 || dtype(backend.Int32) != lib.Int32 || dtype(backend.Int64) != lib.Int64 {
		t.Error("dtype")
	}
	if redop(comm.Sum) != lib.Sum || redop(comm.Mean) != lib.Avg || redop(comm.Max) != lib.Max {
		t.Error("redop")
	}
}

func gpus(t *testing.T) int {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	n, err := gputest.Count()
	if err != nil {
		t.Skip(err)
	}
	return n
}

// TestOneRank runs the conformance suite on a communicator of one
// rank (needs a GPU and NCCL).
func TestOneRank(t *testing.T) {
	if gpus(t) < 1 {
		t.Skip("no GPU")
	}
	dev, err := openGPU(0)
	if err != nil {
		t.Skip(err)
	}
	defer closeGPU(dev)
	store := rendezvous.NewLocal(1)[0]
	k := 0
	e := commtest.Env{Rank: 0, Size: 1, Backend: dev, Logf: t.Logf,
		Open: func(o comm.Options) (comm.Comm, error) {
			k++
			return Open(context.Background(), store, dev, Options{Options: o, Prefix: "one/" + strconv.Itoa(k)})
		},
		Barrier: func(string) error { return nil },
		Add:     commtest.LocalCounters(),
	}
	if err := commtest.RankConformance(context.Background(), e, commtest.Lens(), false); err != nil {
		t.Fatal(err)
	}
}

// TestTwoGPUs runs the conformance and fault suites with one
// process per GPU (needs two GPUs and NCCL).
func TestTwoGPUs(t *testing.T) {
	if n := gpus(t); n < 2 {
		t.Skipf("needs 2 GPUs, found %d", n)
	}
	start := time.Now()
	out, err := commtest.Launch(context.Background(), 2, "gpu", nil, "conformance", "faults")
	t.Logf("2 GPUs: %v\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenArgs: missing, repeated or non-CUDA devices are refused with
// an *OpenError naming the rank, before NCCL or CUDA is touched.
func TestOpenArgs(t *testing.T) {
	ctx := context.Background()
	a, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.Sibling(backend.SiblingOptions{}) // two handles of one device
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		devs []backend.Backend
		rank int
		want string
	}{
		{nil, -1, "at least one device"},
		{[]backend.Backend{a, nil}, 1, "no device"},
		{[]backend.Backend{a, b}, 1, "cpu is rank 0's too"},
		{[]backend.Backend{a}, 0, "cpu is not a CUDA device"},
	} {
		_, err := OpenLocal(ctx, tc.devs, Options{})
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Rank != tc.rank || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d devices: %v; want *OpenError for rank %d with %q", len(tc.devs), err, tc.rank, tc.want)
		}
	}
	var oe *OpenError
	if _, err := Open(ctx, nil, a, Options{}); !errors.As(err, &oe) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := Open(ctx, rendezvous.NewLocal(1)[0], nil, Options{}); !errors.As(err, &oe) {
		t.Errorf("nil device: %v", err)
	}
	if _, err := Open(ctx, rendezvous.NewLocal(1)[0], a, Options{}); !errors.As(err, &oe) || !strings.Contains(err.Error(), "not a CUDA device") {
		t.Errorf("CPU device: %v", err)
	}
}
