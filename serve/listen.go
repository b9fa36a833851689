package serve

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-gnn/strata/comm/auth"
)

// UnixPath returns the socket path of a "unix:PATH" or "unix:///PATH"
// address, and whether addr is one.
func UnixPath(addr string) (string, bool) {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "", false
	}
	if p, ok := strings.CutPrefix(rest, "//"); ok {
		rest = p
	}
	return rest, true
}

// CheckListen says whether a server may listen on addr: a unix socket or
// a loopback address always; any other address only with mutual TLS,
// because the shared secret alone would cross the network in clear text.
func CheckListen(addr string, withTLS bool) error {
	if p, ok := UnixPath(addr); ok {
		if p == "" {
			return fmt.Errorf("serve: --listen %q: empty socket path", addr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("serve: --listen %q: want HOST:PORT or unix:PATH: %v", addr, err)
	}
	if port == "" {
		return fmt.Errorf("serve: --listen %q: no port (0 picks a free one)", addr)
	}
	if withTLS || (host != "" && auth.IsLoopback(addr)) {
		return nil
	}
	return fmt.Errorf("serve: --listen %s is not a loopback address, so mutual TLS is required: give --tls-cert, --tls-key and --tls-ca, "+
		"or listen on 127.0.0.1, [::1] or a unix socket", addr)
}

// Listen opens addr ("HOST:PORT" or "unix:PATH"). A unix socket is made
// readable and writable by its owner only; a stale socket file left by a
// dead server is replaced, any other file at PATH is an error.
func Listen(addr string) (net.Listener, error) {
	p, ok := UnixPath(addr)
	if !ok {
		return net.Listen("tcp", addr)
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("serve: %s exists and is not a socket", p)
		}
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			return nil, fmt.Errorf("serve: %s: another server is listening there", p)
		}
		os.Remove(p)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	return ln, nil
}
