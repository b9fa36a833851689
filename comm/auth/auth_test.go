package auth

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	var warn strings.Builder
	defer func(w io.Writer) { WarnTo = w }(WarnTo)
	WarnTo = &warn
	warned.Clear()
	_, _, _, tlsCfg := testTLS(t)
	secret := []byte("k")
	cases := []struct {
		name  string
		sec   Security
		addrs []string
		want  []string // in the error; nil: accepted
	}{
		{"loopback, nothing", Security{}, []string{"127.0.0.1:1", "[::1]:2", "localhost:3"}, nil},
		{"loopback, secret", Security{Secret: secret}, []string{"127.0.0.1:1"}, nil},
		{"remote, nothing", Security{}, []string{"127.0.0.1:1", "10.0.0.2:5"}, []string{"10.0.0.2:5", EnvTLSCert, EnvTLSKey, EnvTLSCA, EnvInsecure}},
		{"remote, secret alone", Security{Secret: secret}, []string{"10.0.0.2:5"}, []string{"mutual TLS is required", EnvTLSCert}},
		{"remote, TLS", Security{TLS: tlsCfg}, []string{"10.0.0.2:5"}, nil},
		{"remote, TLS and secret", Security{TLS: tlsCfg, Secret: secret}, []string{"10.0.0.2:5"}, nil},
		{"wildcard address, nothing", Security{}, []string{"0.0.0.0:7"}, []string{EnvTLSCert}},
		{"remote, opt-out without secret", Security{InsecureTrustedNetwork: true}, []string{"10.0.0.2:5"}, []string{EnvSecret}},
		{"remote, opt-out and secret", Security{InsecureTrustedNetwork: true, Secret: secret}, []string{"10.0.0.2:5"}, nil},
	}
	for _, c := range cases {
		err := c.sec.Require("x", c.addrs...)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != nil && err == nil:
			t.Errorf("%s: accepted", c.name)
		case err != nil:
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q does not say %q", c.name, err, w)
				}
			}
		}
	}
	// Only the opt-out warned, once, naming itself and the address.
	if got := warn.String(); strings.Count(got, "WARNING") != 1 || !strings.Contains(got, EnvInsecure+"=1") || !strings.Contains(got, "10.0.0.2:5") {
		t.Errorf("warnings: %q; want one naming %s=1 and the address", got, EnvInsecure)
	}
	(Security{InsecureTrustedNetwork: true, Secret: secret}).Require("x", "10.0.0.3:5")
	(Security{InsecureTrustedNetwork: true, Secret: secret}).Require("y", "10.0.0.3:5")
	if n := strings.Count(warn.String(), "WARNING"); n != 2 {
		t.Errorf("%d warnings after a second component used the opt-out; want 2 (one per component)", n)
	}
}

// testTLS writes a test PKI to files and returns their paths and the
// configuration built from them.
func testTLS(t *testing.T) (cert, key, ca string, cfg *tls.Config) {
	t.Helper()
	caPEM, certPEM, keyPEM, err := NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, ca = filepath.Join(dir, "node.pem"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.pem")
	for p, b := range map[string][]byte{cert: certPEM, key: keyPEM, ca: caPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err = MutualTLS(certPEM, keyPEM, caPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, ca, cfg
}

func TestFromEnv(t *testing.T) {
	cert, key, ca, _ := testTLS(t)
	t.Setenv(EnvSecret, "")
	t.Setenv(EnvTLSCert, cert)
	t.Setenv(EnvTLSKey, key)
	t.Setenv(EnvTLSCA, ca)
	t.Setenv(EnvInsecure, "")
	s, err := FromEnv()
	if err != nil || s.TLS == nil || s.TLS.MinVersion != tls.VersionTLS13 || s.InsecureTrustedNetwork {
		t.Fatalf("FromEnv = %+v, %v; want TLS 1.3", s, err)
	}
	if err := s.Require("x", "10.0.0.2:5"); err != nil {
		t.Fatal(err)
	}
	// Config.Env gives a child the same configuration.
	c, _ := ConfigFromLookup(os.LookupEnv)
	env := map[string]string{}
	for _, kv := range c.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if c2, err := ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil || c2 != c {
		t.Errorf("Env round trip: %+v, %v; want %+v", c2, err, c)
	}
	// Two of three files.
	t.Setenv(EnvTLSCA, "")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), EnvTLSCA) {
		t.Errorf("without the CA: %v", err)
	}
	// A file that is not there.
	t.Setenv(EnvTLSCA, filepath.Join(t.TempDir(), "missing.pem"))
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), EnvTLSCA) {
		t.Errorf("missing CA file: %v", err)
	}
	// The opt-out.
	t.Setenv(EnvTLSCert, "")
	t.Setenv(EnvTLSKey, "")
	t.Setenv(EnvTLSCA, "")
	t.Setenv(EnvSecret, "s3cret")
	t.Setenv(EnvInsecure, "1")
	if s, err := FromEnv(); err != nil || !s.InsecureTrustedNetwork || string(s.Secret) != "s3cret" {
		t.Errorf("opt-out: %+v, %v", s, err)
	}
	t.Setenv(EnvInsecure, "yes please")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), EnvInsecure) {
		t.Errorf("bad opt-out value: %v", err)
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
	// A client without a certificate (it trusts the server's CA).
	noCert := &tls.Config{RootCAs: cfg.RootCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13}
	e1, e2 := try(Security{TLS: noCert}, Security{TLS: cfg})
	if e1 == nil && e2 == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if !errors.Is(e1, ErrAuth) || !errors.Is(e2, ErrAuth) {
		t.Errorf("client without a certificate: %v / %v; want ErrAuth on both sides", e1, e2)
	}
}
