package auth

import (
	"errors"
	"net"
	"testing"
	"time"
)

func pipeAuth(t *testing.T, cli, srv Security, cctx, sctx string) (error, error) {
	t.Helper()
	// Real sockets: both sides write before they read, which an
	// unbuffered net.Pipe would deadlock on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	errc := make(chan error, 1)
	go func() { errc <- srv.Authenticate(b, true, []byte(sctx)) }()
	e1 := cli.Authenticate(a, false, []byte(cctx))
	if e1 != nil {
		a.Close()
	}
	e2 := <-errc
	return e1, e2
}

func TestSecret(t *testing.T) {
	good := Security{Secret: []byte("s3cret")}
	if e1, e2 := pipeAuth(t, good, good, "job", "job"); e1 != nil || e2 != nil {
		t.Fatalf("same secret: %v / %v", e1, e2)
	}
	if e1, e2 := pipeAuth(t, Security{}, Security{}, "", ""); e1 != nil || e2 != nil {
		t.Fatalf("no secret: %v / %v", e1, e2)
	}
	cases := []struct {
		name     string
		cli, srv Security
		cc, sc   string
	}{
		{"wrong secret", Security{Secret: []byte("other")}, good, "job", "job"},
		{"client without secret", Security{}, good, "job", "job"},
		{"server without secret", good, Security{}, "job", "job"},
		{"other context", good, good, "job1", "job2"},
	}
	for _, c := range cases {
		e1, e2 := pipeAuth(t, c.cli, c.srv, c.cc, c.sc)
		if !errors.Is(e1, ErrAuth) && !errors.Is(e2, ErrAuth) {
			t.Errorf("%s: got %v / %v, want ErrAuth on one side", c.name, e1, e2)
		}
	}
}

func TestRequire(t *testing.T) {
	var none Security
	if err := none.Require("x", "127.0.0.1:1", "[::1]:2", "localhost:3"); err != nil {
		t.Fatal(err)
	}
	if err := none.Require("x", "127.0.0.1:1", "10.0.0.2:5"); err == nil {
		t.Fatal("non-loopback peer without security accepted")
	}
	if err := (Security{Secret: []byte("k")}).Require("x", "10.0.0.2:5"); err != nil {
		t.Fatal(err)
	}
}

func TestMutualTLS(t *testing.T) {
	ca, cert, key, err := NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := MutualTLS(cert, key, ca, "")
	if err != nil {
		t.Fatal(err)
	}
	ca2, cert2, key2, err := NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	other, err := MutualTLS(cert2, key2, ca2, "")
	if err != nil {
		t.Fatal(err)
	}
	try := func(cli, srv Security) (error, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		errc := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			tc, err := srv.Wrap(c, true)
			if err == nil {
				err = srv.Authenticate(tc, true, nil)
			}
			errc <- err
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc, e1 := cli.Wrap(c, false)
		if e1 == nil {
			e1 = cli.Authenticate(tc, false, nil)
		}
		if e1 != nil {
			c.Close()
		}
		return e1, <-errc
	}
	if e1, e2 := try(Security{TLS: cfg}, Security{TLS: cfg}); e1 != nil || e2 != nil {
		t.Fatalf("same CA: %v / %v", e1, e2)
	}
	if e1, e2 := try(Security{TLS: other}, Security{TLS: cfg}); e1 == nil && e2 == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if e1, e2 := try(Security{TLS: cfg}, Security{TLS: other}); e1 == nil && e2 == nil {
		t.Fatal("a server certificate from another CA was accepted")
	}
}
