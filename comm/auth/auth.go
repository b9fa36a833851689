package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
)

// ErrAuth is wrapped by every authentication failure.
var ErrAuth = errors.New("authentication failed")

// Security is how connections are authenticated. With TLS set, every
// connection is mutual TLS (both sides present certificates signed by the
// configured CA); with Secret set, both sides prove knowledge of it; both
// may be set. Off loopback TLS is required, unless InsecureTrustedNetwork
// lets a secret alone do (see Require).
type Security struct {
	Secret []byte
	TLS    *tls.Config
	// InsecureTrustedNetwork accepts a shared secret without TLS off
	// loopback (STRATA_COMM_INSECURE_TRUSTED_NETWORK=1): peers are
	// authenticated once at connect, but the traffic is neither encrypted
	// nor integrity-protected. Every process that relies on it says so on
	// stderr.
	InsecureTrustedNetwork bool
}

// Enabled reports whether a secret or TLS is configured.
func (s Security) Enabled() bool { return len(s.Secret) > 0 || s.TLS != nil }

// IsLoopback reports whether addr ("host:port" or a host) names a loopback
// address ("localhost" counts).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Require checks that s may be used with peers at addrs; what names the
// component for the messages. Every address on loopback: anything goes
// (a secret is still checked if set). Otherwise mutual TLS is required,
// or, with InsecureTrustedNetwork, at least the shared secret, and then
// a warning goes to stderr (once per process and component).
func (s Security) Require(what string, addrs ...string) error {
	remote, err := s.check(what, addrs)
	if err == nil && remote != "" && s.TLS == nil {
		warnInsecure(what, remote)
	}
	return err
}

// Check is Require without the warning, for a process that only checks
// the configuration of others (the launcher).
func (s Security) Check(what string, addrs ...string) error {
	_, err := s.check(what, addrs)
	return err
}

// check returns the first address off loopback ("" if none) and whether
// s may be used with them.
func (s Security) check(what string, addrs []string) (string, error) {
	remote := ""
	for _, a := range addrs {
		if !IsLoopback(a) {
			remote = a
			break
		}
	}
	switch {
	case remote == "" || s.TLS != nil:
		return remote, nil
	case s.InsecureTrustedNetwork && len(s.Secret) > 0:
		return remote, nil
	case s.InsecureTrustedNetwork:
		return remote, fmt.Errorf("%s: %s is not a loopback address and %s=1 is set, which still needs the shared secret: set %s (the same on every process)",
			what, remote, EnvInsecure, EnvSecret)
	}
	return remote, fmt.Errorf("%s: %s is not a loopback address, so mutual TLS is required: set %s, %s and %s to PEM files "+
		"(this process's certificate and key, and the CA that signed every process's certificate); "+
		"on a trusted network only, %s with %s=1 will do instead", what, remote, EnvTLSCert, EnvTLSKey, EnvTLSCA, EnvSecret, EnvInsecure)
}

// WarnTo receives the warning of a process that relies on
// InsecureTrustedNetwork (os.Stderr; tests replace it).
var WarnTo io.Writer = os.Stderr

var warned sync.Map // component -> true

func warnInsecure(what, addr string) {
	if _, done := warned.LoadOrStore(what, true); done {
		return
	}
	fmt.Fprintf(WarnTo, "strata: WARNING: %s=1: %s talks to %s with a shared secret only, without TLS: "+
		"anyone on this network can read and alter the traffic; use mutual TLS (%s, %s, %s) unless the network is trusted\n",
		EnvInsecure, what, addr, EnvTLSCert, EnvTLSKey, EnvTLSCA)
}

const (
	preambleLen = 4 + 1 + 1 + 16
	macLen      = sha256.Size
	version     = 1
)

var magic = [4]byte{'S', 'T', 'R', 'A'}

// Wrap runs the TLS handshake when configured (server side verifies the
// client's certificate) and returns the connection to use.
func (s Security) Wrap(c net.Conn, server bool) (net.Conn, error) {
	if s.TLS == nil {
		return c, nil
	}
	cfg := s.TLS.Clone()
	if server {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if cfg.ClientCAs == nil {
			cfg.ClientCAs = cfg.RootCAs
		}
		tc := tls.Server(c, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, tlsErr(err)
		}
		return tc, nil
	}
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, tlsErr(err)
	}
	return tc, nil
}

// tlsErr classifies a TLS failure: a connection that broke or timed out
// (a listener at its cap of pending connections closes new ones at once)
// may be retried; anything else (a certificate refused by either side, an
// alert from the peer) wraps ErrAuth.
func tlsErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("TLS handshake: connection lost: %w", err)
	}
	return fmt.Errorf("%w: TLS: %v", ErrAuth, err)
}

// readErr is a read error during the exchange: with TLS 1.3 a server that
// refuses the client's certificate says so (an alert) only after the
// client's handshake has completed, at its first read.
func readErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return fmt.Errorf("%w: TLS: %v", ErrAuth, err)
	}
	return err
}

// Authenticate runs the secret challenge-response on rw (after Wrap). Both
// sides send a preamble (magic, version, whether they use a secret, a
// fresh nonce); with a secret, each then sends HMAC-SHA256(secret, role,
// client nonce, server nonce, context) and checks the other's. context
// binds the exchange to its purpose (e.g. a job id and the two ranks).
// Without a secret on both sides only the preamble is checked.
func (s Security) Authenticate(rw io.ReadWriter, server bool, context []byte) error {
	var mine [preambleLen]byte
	copy(mine[:4], magic[:])
	mine[4] = version
	if len(s.Secret) > 0 {
		mine[5] = 1
	}
	if _, err := rand.Read(mine[6:]); err != nil {
		return err
	}
	if _, err := rw.Write(mine[:]); err != nil {
		return err
	}
	var theirs [preambleLen]byte
	if _, err := io.ReadFull(rw, theirs[:]); err != nil {
		return readErr(err)
	}
	if [4]byte(theirs[:4]) != magic {
		return fmt.Errorf("%w: peer is not a Strata endpoint (bad magic %q)", ErrAuth, theirs[:4])
	}
	if theirs[4] != version {
		return fmt.Errorf("%w: peer speaks version %d, want %d", ErrAuth, theirs[4], version)
	}
	if theirs[5] != mine[5] {
		if mine[5] == 1 {
			return fmt.Errorf("%w: this side uses a shared secret but the peer has none", ErrAuth)
		}
		return fmt.Errorf("%w: the peer uses a shared secret but this side has none (set STRATA_COMM_SECRET)", ErrAuth)
	}
	if len(s.Secret) == 0 {
		return nil
	}
	cn, sn := mine[6:], theirs[6:] // client's and server's nonces
	if server {
		cn, sn = sn, cn
	}
	mac := func(role string) []byte {
		h := hmac.New(sha256.New, s.Secret)
		h.Write([]byte(role))
		h.Write(cn)
		h.Write(sn)
		h.Write(context)
		return h.Sum(nil)
	}
	myRole, peerRole := "strata-client", "strata-server"
	if server {
		myRole, peerRole = peerRole, myRole
	}
	if _, err := rw.Write(mac(myRole)); err != nil {
		return err
	}
	got := make([]byte, macLen)
	if _, err := io.ReadFull(rw, got); err != nil {
		return readErr(err)
	}
	if !hmac.Equal(got, mac(peerRole)) {
		return fmt.Errorf("%w: the peer does not know the shared secret", ErrAuth)
	}
	return nil
}

// MutualTLS builds a configuration usable on both sides of a connection:
// this endpoint's certificate and key, the CA that signed every peer's
// certificate, and the name peers' certificates carry (their SAN).
func MutualTLS(certPEM, keyPEM, caPEM []byte, serverName string) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("TLS CA: no certificates found in PEM data")
	}
	if serverName == "" {
		serverName = "strata"
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
