package rendezvous

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
)

// flaky fails its first accepts with EMFILE, as a process out of file
// descriptors does (after a burst of connections).
type flaky struct {
	net.Listener
	fails atomic.Int32
}

func (l *flaky) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// joinServed joins the store srv serves, as Join does on ranks other
// than 0.
func joinServed(ctx context.Context, e Env, sec auth.Security) (Store, error) {
	cl, err := dial(ctx, e, Options{Security: sec})
	if err != nil {
		return nil, err
	}
	if err := cl.Barrier(ctx, "join"); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

func joinEvery(t *testing.T, es []Env, sec auth.Security, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for r := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s Store
			if s, errs[r] = joinServed(ctx, es[r], sec); s != nil {
				defer s.Close()
				errs[r] = s.Barrier(ctx, "left")
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestAcceptRetriesTemporaryErrors: the store's listener fails a few
// accepts with EMFILE; the store keeps accepting and every rank joins.
func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	es := testEnv(t, 3)
	ln, err := net.Listen("tcp", es[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	fl := &flaky{Listener: ln}
	fl.fails.Store(4)
	srv := Serve(fl, 3, auth.Security{})
	defer srv.Close()
	joinEvery(t, es, auth.Security{}, 10*time.Second)
}

// TestIdleFlood: a burst of idle connections beyond auth.MaxPending is
// closed at once (the rest are dropped after auth.HandshakeTimeout), and
// real ranks still join meanwhile, within their deadline: with mutual TLS
// too, where a connection closed during the handshake must be retried,
// not taken for a refused certificate.
func TestIdleFlood(t *testing.T) {
	ca, cert, key, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := auth.MutualTLS(cert, key, ca, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sec  auth.Security
	}{{"plain", auth.Security{}}, {"tls", auth.Security{TLS: cfg}}} {
		t.Run(tc.name, func(t *testing.T) { idleFlood(t, tc.sec) })
	}
}

func idleFlood(t *testing.T, sec auth.Security) {
	defer func(n int) { auth.MaxPending = n }(auth.MaxPending)
	auth.MaxPending = 16
	const excess = 40
	es := testEnv(t, 2)
	ln, err := net.Listen("tcp", es[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, 2, sec)
	defer srv.Close()

	idle := make([]net.Conn, auth.MaxPending+excess)
	for i := range idle {
		c, err := net.Dial("tcp", es[0].Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[i] = c
	}
	// Closed at once: reading sees EOF (or a reset) long before the
	// handshake timeout; a held one (which may get the server's
	// preamble) reads until its own read deadline.
	var closed atomic.Int32
	var wg sync.WaitGroup
	dl := time.Now().Add(auth.HandshakeTimeout / 3)
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(dl)
			_, err := io.Copy(io.Discard, c)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := closed.Load(); n < excess {
		t.Errorf("%d of %d idle connections closed within %v; want the %d beyond the cap of %d closed at once",
			n, len(idle), auth.HandshakeTimeout/3, excess, auth.MaxPending)
	}
	// The real ranks join while the held ones still fill the cap.
	joinEvery(t, es, sec, auth.HandshakeTimeout+5*time.Second)
}
