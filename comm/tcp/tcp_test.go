package tcp_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/tcp"
)

// Small segments so the conformance lengths span many of them.
func newGroup(n int, o comm.Options) ([]comm.Comm, error) {
	return tcp.NewLocal(n, tcp.Options{Options: o, SegmentBytes: 1 << 10})
}

// The suites run on CPU back-end buffers (the nil back end).

func TestConformance(t *testing.T) { commtest.Conformance(t, nil, newGroup) }

func TestFaults(t *testing.T) { commtest.Faults(t, nil, newGroup, nil) }

func TestConformanceAlloc(t *testing.T) { commtest.ConformanceAlloc(t, nil, newGroup) }

// openAll opens a group through local stores with per-rank options.
func openAll(n int, opts func(r int) tcp.Options, timeout time.Duration) ([]comm.Comm, []error) {
	stores := rendezvous.NewLocal(n)
	cs, errs := make([]comm.Comm, n), make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for r := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = tcp.New(ctx, stores[r], opts(r))
		}()
	}
	wg.Wait()
	return cs, errs
}

func closeAll(cs []comm.Comm) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

func allReduceWorks(t *testing.T, cs []comm.Comm) {
	t.Helper()
	for _, err := range commtest.OnAll(cs, func(c comm.Comm) error {
		return commtest.RunCase(context.Background(), c, nil, commtest.Case{Op: comm.OpAllReduce, DType: commtest.DTypes[0], Red: comm.Sum, Len: 1000, Seed: 1})
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestSecurity(t *testing.T) {
	// Advertising a non-loopback address without TLS is refused, with a
	// secret too, naming what to set.
	secret := auth.Security{Secret: []byte("job secret")}
	for _, sec := range []auth.Security{{}, secret} {
		cs, errs := openAll(2, func(int) tcp.Options { return tcp.Options{Host: "0.0.0.0", Security: sec} }, 5*time.Second)
		closeAll(cs)
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), auth.EnvTLSCert) {
				t.Errorf("rank %d on 0.0.0.0 without TLS (secret %q): %v; want a refusal naming %s", r, sec.Secret, err, auth.EnvTLSCert)
			}
		}
	}
	// On a trusted network, the secret with the explicit opt-out works.
	trusted := secret
	trusted.InsecureTrustedNetwork = true
	cs, errs := openAll(3, func(int) tcp.Options { return tcp.Options{Host: "0.0.0.0", Security: trusted} }, 5*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	allReduceWorks(t, cs)
	closeAll(cs)
	// On loopback the secret alone works.
	cs, errs = openAll(3, func(int) tcp.Options { return tcp.Options{Security: secret} }, 5*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	allReduceWorks(t, cs)
	closeAll(cs)
	// A rank with the wrong secret is not let in: setup fails by the deadline.
	cs, errs = openAll(2, func(r int) tcp.Options {
		if r == 1 {
			return tcp.Options{Security: auth.Security{Secret: []byte("wrong")}}
		}
		return tcp.Options{Security: secret}
	}, 500*time.Millisecond)
	closeAll(cs)
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("wrong secret accepted: %v", errs)
	}
	// Mutual TLS.
	ca, cert, key, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := auth.MutualTLS(cert, key, ca, "strata")
	if err != nil {
		t.Fatal(err)
	}
	cs, errs = openAll(3, func(int) tcp.Options { return tcp.Options{Host: "0.0.0.0", Security: auth.Security{TLS: cfg}} }, 5*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	allReduceWorks(t, cs)
	closeAll(cs)
	// A certificate from another CA is refused.
	ca2, cert2, key2, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	other, err := auth.MutualTLS(cert2, key2, ca2, "strata")
	if err != nil {
		t.Fatal(err)
	}
	cs, errs = openAll(2, func(r int) tcp.Options {
		if r == 1 {
			return tcp.Options{Security: auth.Security{TLS: other}}
		}
		return tcp.Options{Security: auth.Security{TLS: cfg}}
	}, 500*time.Millisecond)
	closeAll(cs)
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("foreign certificate accepted: %v", errs)
	}
}

func TestSetupNamesMissingRank(t *testing.T) {
	stores := rendezvous.NewLocal(3)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tcp.New(ctx, stores[r], tcp.Options{})
			if c != nil {
				c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: %v, want an error naming rank 2", r, err)
		}
	}
}

func BenchmarkAllReduce(b *testing.B) {
	def := func(n int, o comm.Options) ([]comm.Comm, error) {
		return tcp.NewLocal(n, tcp.Options{Options: o})
	}
	commtest.BenchmarkAllReduce(b, def, 2, 64<<10, 1<<20, 16<<20)
}
