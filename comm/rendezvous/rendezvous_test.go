package rendezvous

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
)

func TestFromLookup(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	e, err := FromLookup(env("RANK", "2", "WORLD_SIZE", "4", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Rank != 2 || e.WorldSize != 4 || e.Addr() != "10.0.0.1:29500" || e.LocalRank != 0 || e.LocalWorldSize != 2 {
		t.Fatalf("%+v", e)
	}
	e, err = FromLookup(env("RANK", "0", "WORLD_SIZE", "1", "MASTER_ADDR", "::1", "MASTER_PORT", "1"))
	if err != nil || e.LocalRank != -1 || e.Addr() != "[::1]:1" {
		t.Fatalf("%+v %v", e, err)
	}
	bad := []struct {
		name string
		env  func(string) (string, bool)
	}{
		{"RANK", env("WORLD_SIZE", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"RANK", env("RANK", "4", "WORLD_SIZE", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"WORLD_SIZE", env("RANK", "0", "WORLD_SIZE", "0", "MASTER_ADDR", "h", "MASTER_PORT", "1")},
		{"MASTER_PORT", env("RANK", "0", "WORLD_SIZE", "1", "MASTER_ADDR", "h", "MASTER_PORT", "70000")},
		{"MASTER_ADDR", env("RANK", "0", "WORLD_SIZE", "1", "MASTER_PORT", "5")},
		{"LOCAL_RANK", env("RANK", "0", "WORLD_SIZE", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1", "LOCAL_RANK", "x")},
	}
	for _, b := range bad {
		if _, err := FromLookup(b.env); err == nil || !strings.Contains(err.Error(), b.name) {
			t.Errorf("%s: error %v should name it", b.name, err)
		}
	}
}

func testEnv(t *testing.T, n int) []Env {
	port, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	es := make([]Env, n)
	for r := range es {
		es[r] = Env{Rank: r, WorldSize: n, LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: port}
	}
	return es
}

// joinAll joins the given ranks concurrently.
func joinAll(t *testing.T, es []Env, ranks []int, o Options) ([]Store, []error) {
	stores, errs := make([]Store, len(es)), make([]error, len(es))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r != 0 {
				time.Sleep(time.Duration(r) * 10 * time.Millisecond) // rank 0 usually late or early; both work
			}
			stores[r], errs[r] = Join(context.Background(), es[r], o)
		}()
	}
	wg.Wait()
	return stores, errs
}

func closeStores(ss []Store) {
	// Rank 0 last: it serves the store.
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i] != nil {
			ss[i].Close()
		}
	}
}

func exercise(t *testing.T, stores []Store) {
	t.Helper()
	ctx := context.Background()
	n := len(stores)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				if s.Rank() != r || s.Size() != n {
					return fmt.Errorf("rank/size %d/%d", s.Rank(), s.Size())
				}
				// Get waits for a key another rank sets later.
				if r == n-1 {
					time.Sleep(30 * time.Millisecond)
				}
				if err := s.Set(ctx, fmt.Sprintf("addr/%d", r), []byte(fmt.Sprintf("value-%d", r))); err != nil {
					return err
				}
				for p := 0; p < n; p++ {
					v, err := s.Get(ctx, fmt.Sprintf("addr/%d", p))
					if err != nil {
						return err
					}
					if string(v) != fmt.Sprintf("value-%d", p) {
						return fmt.Errorf("got %q from rank %d", v, p)
					}
				}
				if _, err := s.Add(ctx, "counter", int64(r+1)); err != nil {
					return err
				}
				for i := 0; i < 3; i++ {
					if err := s.Barrier(ctx, "b"); err != nil {
						return err
					}
				}
				v, err := s.Add(ctx, "counter", 0)
				if err != nil {
					return err
				}
				if v != int64(n*(n+1)/2) {
					return fmt.Errorf("counter = %d after the barrier, want %d", v, n*(n+1)/2)
				}
				sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				var we *WaitError
				if _, err := s.Get(sctx, "never"); !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("Get of an absent key: %v", err)
				}
				if err := s.Set(ctx, strings.Repeat("k", MaxKey+1), nil); err == nil {
					return errors.New("over-long key accepted")
				}
				if err := s.Set(ctx, "big", make([]byte, MaxValue+1)); err == nil {
					return errors.New("over-long value accepted")
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestLocal(t *testing.T) {
	stores := NewLocal(3)
	exercise(t, stores)
	// A barrier missing rank 2 names it.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var we *WaitError
	errs := make(chan error, 2)
	for _, s := range stores[:2] {
		go func() { errs <- s.Barrier(ctx, "x") }()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.As(err, &we) || !slices.Equal(we.Missing, []int{2}) {
			t.Fatalf("barrier without rank 2: %v", err)
		}
	}
}

func TestJoin(t *testing.T) {
	es := testEnv(t, 4)
	stores, errs := joinAll(t, es, []int{0, 1, 2, 3}, Options{Timeout: 10 * time.Second})
	defer closeStores(stores)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	exercise(t, stores)
}

func TestJoinSecret(t *testing.T) {
	es := testEnv(t, 2)
	o := Options{Timeout: 10 * time.Second, Security: auth.Security{Secret: []byte("k")}}
	stores, errs := joinAll(t, es, []int{0, 1}, o)
	closeStores(stores)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	// Wrong secret: rank 1 is refused at once (not after the timeout).
	es = testEnv(t, 2)
	done := make(chan error, 1)
	go func() {
		s, err := Join(context.Background(), es[0], Options{Timeout: 500 * time.Millisecond, Security: auth.Security{Secret: []byte("k")}})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	_, err := Join(context.Background(), es[1], Options{Timeout: 2 * time.Second, Security: auth.Security{Secret: []byte("wrong")}})
	if !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("wrong secret: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("wrong secret took %v to report", time.Since(start))
	}
	if err := <-done; err == nil {
		t.Fatal("rank 0 joined without rank 1")
	}
	// A non-loopback master without TLS is refused up front, with a
	// secret too, naming what to set.
	for _, sec := range []auth.Security{{}, {Secret: []byte("k")}} {
		_, err := Join(context.Background(), Env{Rank: 1, WorldSize: 2, MasterAddr: "10.1.2.3", MasterPort: 9}, Options{Timeout: time.Second, Security: sec})
		if err == nil || !strings.Contains(err.Error(), auth.EnvTLSCert) {
			t.Fatalf("non-loopback master without TLS (secret %q): %v", sec.Secret, err)
		}
	}
}

// TestJoinTLS: mutual TLS end to end on loopback; a rank with a
// certificate from another CA, or with none, is refused at once.
func TestJoinTLS(t *testing.T) {
	pki := func() *tls.Config {
		ca, cert, key, err := auth.NewTestPKI("strata")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := auth.MutualTLS(cert, key, ca, "")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg, other := pki(), pki()
	o := Options{Timeout: 10 * time.Second, Security: auth.Security{TLS: cfg}}
	es := testEnv(t, 3)
	stores, errs := joinAll(t, es, []int{0, 1, 2}, o)
	defer closeStores(stores)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	exercise(t, stores)

	noCert := &tls.Config{RootCAs: cfg.RootCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13}
	for name, bad := range map[string]*tls.Config{"a certificate from another CA": other, "no certificate": noCert} {
		es := testEnv(t, 2)
		done := make(chan error, 1)
		go func() {
			s, err := Join(context.Background(), es[0], Options{Timeout: time.Second, Security: auth.Security{TLS: cfg}})
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		start := time.Now()
		_, err := Join(context.Background(), es[1], Options{Timeout: 5 * time.Second, Security: auth.Security{TLS: bad}})
		if !errors.Is(err, auth.ErrAuth) {
			t.Errorf("%s: %v; want ErrAuth", name, err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("%s: refused after %v; want at once", name, el)
		}
		if err := <-done; err == nil {
			t.Errorf("%s: rank 0 joined without rank 1", name)
		}
	}
}

func TestJoinMissing(t *testing.T) {
	d := 300 * time.Millisecond
	// Rank 2 never arrives: ranks 0 and 1 fail naming it.
	es := testEnv(t, 3)
	start := time.Now()
	stores, errs := joinAll(t, es, []int{0, 1}, Options{Timeout: d})
	closeStores(stores)
	for r := 0; r < 2; r++ {
		var we *WaitError
		if !errors.As(errs[r], &we) || !slices.Equal(we.Missing, []int{2}) || !strings.Contains(errs[r].Error(), "[2]") {
			t.Errorf("rank %d: %v, want a WaitError naming rank 2", r, errs[r])
		}
	}
	if el := time.Since(start); el > d+2*time.Second {
		t.Errorf("took %v", el)
	}
	// Rank 0 never arrives: rank 1 fails naming it.
	es = testEnv(t, 2)
	start = time.Now()
	_, err := Join(context.Background(), es[1], Options{Timeout: d})
	var we *WaitError
	if !errors.As(err, &we) || !slices.Equal(we.Missing, []int{0}) {
		t.Errorf("without rank 0: %v", err)
	}
	if el := time.Since(start); el > d+2*time.Second {
		t.Errorf("took %v", el)
	}
}

func TestServerRejects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, 2, auth.Security{})
	defer srv.Close()
	addr := srv.Addr()
	host, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	e := Env{Rank: 1, WorldSize: 2, MasterAddr: host, MasterPort: p}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c1, err := dial(ctx, e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	// A second connection claiming the same rank is refused.
	if _, err := dial(ctx, e, Options{}); err == nil || !strings.Contains(err.Error(), "already connected") {
		t.Errorf("duplicate rank: %v", err)
	}
	// A wrong world size is refused.
	if _, err := dial(ctx, Env{Rank: 0, WorldSize: 3, MasterAddr: host, MasterPort: p}, Options{}); err == nil || !strings.Contains(err.Error(), "WORLD_SIZE=3") {
		t.Errorf("wrong world size: %v", err)
	}
	// A frame claiming 1 GiB is refused before allocation: the server
	// drops the connection and keeps serving.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	if err := (auth.Security{}).Authenticate(raw, false, []byte("strata-store")); err != nil {
		t.Fatal(err)
	}
	raw.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	buf := make([]byte, 1)
	if _, err := raw.Read(buf); err == nil {
		t.Error("server answered a 1 GiB frame")
	}
	raw.Close()
	if err := c1.Set(ctx, "still", []byte("serving")); err != nil {
		t.Fatal(err)
	}
}
