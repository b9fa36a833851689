package auth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLimiter: n pending connections are admitted, the next is refused,
// and a release (idempotent) frees exactly one slot.
func TestLimiter(t *testing.T) {
	l := NewLimiter(2)
	r1, ok1 := l.Admit()
	_, ok2 := l.Admit()
	if !ok1 || !ok2 {
		t.Fatal("first two connections refused")
	}
	if _, ok := l.Admit(); ok {
		t.Fatal("third connection admitted with a limit of 2")
	}
	r1()
	r1() // a second release must not free another slot
	if _, ok := l.Admit(); !ok {
		t.Fatal("no slot after a release")
	}
	if _, ok := l.Admit(); ok {
		t.Fatal("a double release freed two slots")
	}
	if d := NewLimiter(0); cap(d.slots) != MaxPending {
		t.Fatalf("NewLimiter(0) holds %d, want MaxPending %d", cap(d.slots), MaxPending)
	}
}

type tempErr struct{}

func (tempErr) Error() string   { return "too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

// fakeListener returns errs in turn from Accept, then conn.
type fakeListener struct {
	errs  []error
	conn  net.Conn
	calls int
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.calls++
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return f.conn, nil
}
func (f *fakeListener) Close() error   { return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestAccept: temporary errors are retried until a connection comes;
// a closed listener or a passed deadline is returned at once; a
// temporary error after stop is closed is returned.
func TestAccept(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ln := &fakeListener{errs: []error{tempErr{}, &net.OpError{Op: "accept", Err: tempErr{}}}, conn: a}
	c, err := Accept(ln, nil)
	if err != nil || c != a || ln.calls != 3 {
		t.Fatalf("Accept after two temporary errors: %v, %v after %d calls", c, err, ln.calls)
	}
	for _, perm := range []error{net.ErrClosed, &net.OpError{Op: "accept", Err: errors.New("deadline")}, syscall.EINVAL} {
		ln = &fakeListener{errs: []error{perm}, conn: a}
		if c, err := Accept(ln, nil); c != nil || !errors.Is(err, perm) || ln.calls != 1 {
			t.Fatalf("Accept with %v: %v, %v after %d calls", perm, c, err, ln.calls)
		}
	}
	stop := make(chan struct{})
	close(stop)
	ln = &fakeListener{errs: []error{tempErr{}}, conn: a}
	if c, err := Accept(ln, stop); c != nil || !errors.Is(err, tempErr{}) || ln.calls != 1 {
		t.Fatalf("Accept after stop: %v, %v after %d calls", c, err, ln.calls)
	}
	// A real listener past its deadline.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	tl.(*net.TCPListener).SetDeadline(time.Now().Add(-time.Second))
	if _, err := Accept(tl, nil); err == nil || temporary(err) {
		t.Fatalf("Accept past the deadline: %v", err)
	}
}

// TestEnabledAndCheck: Enabled says whether a secret or TLS is set;
// Check applies Require's rules without printing the warning.
func TestEnabledAndCheck(t *testing.T) {
	if (Security{}).Enabled() || !(Security{Secret: []byte("s")}).Enabled() || !(Security{TLS: &tls.Config{}}).Enabled() {
		t.Fatal("Enabled")
	}
	var warn bytes.Buffer
	old := WarnTo
	WarnTo = &warn
	defer func() { WarnTo = old }()
	s := Security{Secret: []byte("s"), InsecureTrustedNetwork: true}
	if err := s.Check("check-test", "127.0.0.1:1", "10.0.0.1:2"); err != nil {
		t.Fatalf("Check with a secret on a trusted network: %v", err)
	}
	if warn.Len() != 0 {
		t.Fatalf("Check warned: %q", warn.String())
	}
	err := (Security{}).Check("check-test", "localhost:5", "10.0.0.1:2")
	if err == nil || !strings.HasPrefix(err.Error(), "check-test: 10.0.0.1:2 is not a loopback address, so mutual TLS is required") {
		t.Fatalf("Check without TLS off loopback: %v", err)
	}
}

// TestTLSErrClass: a handshake cut by the peer is a lost connection (to be
// retried), not ErrAuth.
func TestTLSErrClass(t *testing.T) {
	ca, cert, key, err := NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := MutualTLS(cert, key, ca, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The peer closes the connection without a word, on either side.
	for _, server := range []bool{false, true} {
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				accepted <- nil
				return
			}
			accepted <- c
		}()
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		var sc net.Conn
		select {
		case sc = <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatal("no connection accepted within 10s")
		}
		if sc == nil {
			t.Fatal("accept failed")
		}
		mine, peer := cc, sc
		if server {
			mine, peer = sc, cc
		}
		peer.Close()
		mine.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = Security{TLS: cfg}.Wrap(mine, server)
		mine.Close()
		if err == nil || errors.Is(err, ErrAuth) || !strings.HasPrefix(err.Error(), "TLS handshake: connection lost") {
			t.Fatalf("handshake (server %v) with a closed peer: %v", server, err)
		}
	}
	if err := tlsErr(errors.New("bad certificate")); !errors.Is(err, ErrAuth) {
		t.Fatalf("tlsErr(other) = %v, want ErrAuth", err)
	}
}
