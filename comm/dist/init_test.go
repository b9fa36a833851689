package dist_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/dist"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// initGroup runs InitEnv for n goroutine ranks on a loopback store and
// returns their communicators, infos and errors (within a 20 s deadline).
func initGroup(t *testing.T, n int, o dist.Options) ([]comm.Comm, []dist.Info, []error) {
	t.Helper()
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cs, infos, errs := make([]comm.Comm, n), make([]dist.Info, n), make([]error, n)
	done := make(chan struct{}, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for r := 0; r < n; r++ {
		go func() {
			defer func() { done <- struct{}{} }()
			env := rendezvous.Env{Rank: r, WorldSize: n, LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: port}
			cs[r], infos[r], errs[r] = dist.InitEnv(ctx, env, o)
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-time.After(25 * time.Second):
			t.Fatalf("InitEnv: %d of %d ranks returned within 25s", i, n)
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
	return cs, infos, errs
}

// TestInitEnvBackends opens 2-rank groups in one process with each
// requested back end (and auto), checks what Info reports and runs an
// all-reduce on the result.
func TestInitEnvBackends(t *testing.T) {
	tests := []struct {
		backend, kind, reason string
		heap                  int
	}{
		{"", comm.KindShm, "all ranks are on one host", 0},
		{"shm", comm.KindShm, "requested", -1},
		{"shm", comm.KindShm, "requested", 1 << 20},
		{"tcp", comm.KindTCP, "requested", 0},
	}
	for _, tc := range tests {
		t.Run(tc.backend+"/"+tc.kind, func(t *testing.T) {
			o := dist.Options{Backend: tc.backend, Comm: comm.Options{Timeout: 10 * time.Second}, Security: &auth.Security{},
				SetupTimeout: 15 * time.Second, ShmHeapBytes: tc.heap, ShmSlotBytes: 16 << 10, TCPSegmentBytes: 8 << 10}
			cs, infos, errs := initGroup(t, 2, o)
			for r := range cs {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if infos[r].Kind != tc.kind || !infos[r].SameHost || !strings.Contains(infos[r].Reason, tc.reason) || infos[r].Env.Rank != r {
					t.Fatalf("rank %d: Info = %+v, want kind %s (%s)", r, infos[r], tc.kind, tc.reason)
				}
			}
			res := make(chan error, 2)
			for r := range cs {
				go func() {
					x := []int64{int64(r + 5)}
					err := cs[r].AllReduce(context.Background(), cpu.WrapI64(x), comm.Sum)
					if err == nil && x[0] != 11 {
						err = errors.New("sum is not 11")
					}
					res <- err
				}()
			}
			for range cs {
				select {
				case err := <-res:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("all-reduce did not return within 15s")
				}
			}
			// With Alloc on shm a heap of -1 means none: still served (from the Go heap).
			if b, err := cs[0].Alloc(cpu.WrapI64(nil).DType(), 4); err != nil || b.Len() != 4 {
				t.Fatalf("Alloc: %v (%d elements)", err, b.Len())
			}
		})
	}
}

// TestInitEnvSingle: a world of one opens the in-process back end
// whatever the store says.
func TestInitEnvSingle(t *testing.T) {
	cs, infos, errs := initGroup(t, 1, dist.Options{Security: &auth.Security{}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if infos[0].Kind != comm.KindInproc || cs[0].Kind() != "inproc" || cs[0].Size() != 1 {
		t.Fatalf("Info = %+v, Kind %q", infos[0], cs[0].Kind())
	}
	x := []float32{2.5}
	if err := cs[0].AllReduce(context.Background(), cpu.WrapF32(x), comm.Mean); err != nil || x[0] != 2.5 {
		t.Fatalf("single-rank all-reduce: %v, %v", err, x)
	}
}

// TestInitEnvErrors: an unknown or unavailable back end fails with an
// error naming the rank and the reason. (One rank: with more, a rank
// that fails first closes the store under the others, which then report
// that instead.)
func TestInitEnvErrors(t *testing.T) {
	gpu := func() (bool, bool) { return true, true }
	tests := []struct {
		backend string
		gpu     func() (bool, bool)
		want    string
	}{
		{"bogus", nil, `dist rank 0: comm: unknown --comm "bogus"`},
		{"nccl", nil, "dist rank 0: comm: --comm nccl needs a GPU per rank"},
		{"nccl", gpu, "dist rank 0: the NCCL back end is not built yet"},
	}
	for _, tc := range tests {
		cs, _, errs := initGroup(t, 1, dist.Options{Backend: tc.backend, GPU: tc.gpu, Security: &auth.Security{}, SetupTimeout: 10 * time.Second})
		if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), tc.want) || cs[0] != nil {
			t.Fatalf("--comm %s: got %v, want %q", tc.backend, errs[0], tc.want)
		}
	}
}

// TestInitFromEnv: Init reads RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT; a missing one is an error naming it.
func TestInitFromEnv(t *testing.T) {
	t.Setenv("WORLD_SIZE", "")
	if _, _, err := dist.Init(context.Background(), dist.Options{}); err == nil || !strings.Contains(err.Error(), "WORLD_SIZE is not set") {
		t.Fatalf("Init without WORLD_SIZE: %v", err)
	}
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORLD_SIZE", "1")
	t.Setenv("RANK", "0")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("MASTER_PORT", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, info, err := dist.Init(ctx, dist.Options{Security: &auth.Security{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info.Kind != comm.KindInproc || info.Env.MasterPort != port {
		t.Fatalf("Info = %+v", info)
	}
}

// TestInitEnvJoinErrors: a bad security environment and a store that
// never answers both fail InitEnv (the latter by SetupTimeout) with the
// cause.
func TestInitEnvJoinErrors(t *testing.T) {
	t.Setenv(auth.EnvInsecure, "maybe")
	env := rendezvous.Env{Rank: 0, WorldSize: 1, LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: 1}
	_, _, err := dist.InitEnv(context.Background(), env, dist.Options{})
	if err == nil || !strings.Contains(err.Error(), auth.EnvInsecure+`="maybe", want 1 or 0`) {
		t.Fatalf("bad %s: got %v", auth.EnvInsecure, err)
	}

	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	env = rendezvous.Env{Rank: 1, WorldSize: 2, LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: port}
	c, _, err := dist.InitEnv(context.Background(), env, dist.Options{Security: &auth.Security{}, SetupTimeout: 300 * time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("InitEnv without a store succeeded")
	}
	if want := "ranks [0] never arrived at the store"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), env.Addr()) {
		t.Fatalf("no store: got %v, want %q naming %s", err, want, env.Addr())
	}
}
