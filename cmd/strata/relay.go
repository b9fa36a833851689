package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/serve"
	"github.com/strata-gnn/strata/train"
)

// envUpstreamSecret holds the shared secret `strata relay` sends to its
// upstream servers (its own, for its clients, is STRATA_SERVE_SECRET).
const envUpstreamSecret = "STRATA_UPSTREAM_SECRET"

// relayCmd is 'strata relay': the local end of strata_pyg's server-client
// mode (serve.Relay). It receives the batches of remote `strata serve`s
// over gRPC and writes them into worker mode's shared-memory ring, so
// that the trainer maps them instead of receiving them in Python.
type relayCmd struct {
	Upstream string        `help:"Comma-separated addresses of the servers to relay (HOST:PORT or unix:PATH), as strata_pyg's data= lists them." required:"" placeholder:"ADDR,..."`
	Streams  int           `help:"Streams (connections) per upstream server; stream k of all of them asks for part k (round-robin routing)." default:"1"`
	Routing  string        `help:"round_robin: batch i from stream i mod the streams; partition: each server its own seeds (strata serve --part), a server at a time in turn." enum:"round_robin,partition" default:"round_robin"`
	Listen   string        `help:"Address for the trainer: unix:PATH or a loopback HOST:PORT." default:"127.0.0.1:7078" placeholder:"ADDR"`
	RingDir  string        `name:"ring-dir" type:"path" help:"Directory of the shared-memory rings (on a memory file system such as /dev/shm)." required:"" placeholder:"DIR"`
	RingMB   int           `name:"ring-mb" help:"Most MiB one stream's ring takes (and at most half the free space of --ring-dir)." default:"2048"`
	Release  time.Duration `name:"release-timeout" help:"How long a stream waits for the trainer to release a ring slot, unless it says." default:"1h"`
	Timeout  time.Duration `help:"Deadline of each request to an upstream server, and the longest wait for its next batch." default:"2m"`
	MaxMsgMB int           `name:"max-message-mb" help:"Largest batch message accepted from an upstream server, in MiB." default:"1024"`
	Drain    time.Duration `name:"drain-timeout" help:"On SIGTERM or SIGINT, how long running streams may take to finish before they are cut." default:"30s"`
	ExitPar  bool          `name:"exit-with-parent" help:"Drain and exit when the parent process exits or standard input closes (how strata_pyg starts its relay)."`

	TLSCert    string `name:"tls-cert" type:"path" help:"PEM client certificate for the upstream servers; with --tls-key and --tls-ca, mutual TLS to them."`
	TLSKey     string `name:"tls-key" type:"path" help:"PEM private key of --tls-cert."`
	TLSCA      string `name:"tls-ca" type:"path" help:"PEM certificate of the CA that signed the servers' certificates."`
	TLSName    string `name:"tls-name" help:"DNS name in the servers' certificates (strata if empty)."`
	SecretFile string `name:"upstream-secret-file" type:"path" help:"File holding the upstream servers' shared secret (else STRATA_UPSTREAM_SECRET; none: no secret). The relay's own secret, for its clients, is STRATA_SERVE_SECRET." placeholder:"FILE"`
}

func (c *relayCmd) Validate() error {
	return firstError(
		intIn("streams", c.Streams, 1, 16),
		intIn("ring-mb", c.RingMB, 1, 1<<20),
		intIn("max-message-mb", c.MaxMsgMB, 1, 2047),
		durationIn("release-timeout", c.Release, time.Second, 24*time.Hour),
		durationIn("timeout", c.Timeout, time.Second, 24*time.Hour),
		durationIn("drain-timeout", c.Drain, 0, 24*time.Hour),
	)
}

// upstreams parses --upstream.
func (c *relayCmd) upstreams() ([]string, error) {
	var out []string
	for _, a := range strings.Split(c.Upstream, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, usageError{fmt.Errorf("--upstream %q: an empty address", c.Upstream)}
		}
		if _, unix := serve.UnixPath(a); !unix {
			if i := strings.LastIndex(a, ":"); i <= 0 || i == len(a)-1 {
				return nil, usageError{fmt.Errorf("--upstream %q: want HOST:PORT or unix:PATH", a)}
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func (c *relayCmd) Run(e *env) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	addrs, err := c.upstreams()
	if err != nil {
		return err
	}
	if fi, err := os.Stat(c.RingDir); err != nil || !fi.IsDir() {
		return usageError{fmt.Errorf("--ring-dir %s: not a directory", c.RingDir)}
	}
	sec, err := auth.Config{TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSCA: c.TLSCA, TLSName: c.TLSName}.Security()
	if err != nil {
		return usageError{err}
	}
	upSecret, err := readSecret(envUpstreamSecret, "upstream-secret-file", c.SecretFile)
	if err != nil {
		return err
	}
	// The relay itself serves only this host (no TLS of its own).
	if err := serve.CheckListen(c.Listen, false); err != nil {
		return usageError{err}
	}
	var own []byte
	if s := os.Getenv(envServeSecret); s != "" {
		own = []byte(s)
	}
	msg := c.MaxMsgMB << 20
	var ups []*serve.Client
	defer func() {
		for _, u := range ups {
			u.Close()
		}
	}()
	for _, a := range addrs {
		for range c.Streams {
			u, err := serve.Dial(a, serve.ClientOptions{TLS: sec.TLS, Secret: []byte(upSecret), MaxRecvBytes: msg, Timeout: c.Timeout, BulkReceive: true})
			if err != nil {
				return err
			}
			ups = append(ups, u)
		}
	}
	serve.Version = train.Version
	srv, err := serve.New(serve.Options{Relay: &serve.Relay{Upstreams: ups, ByPartition: c.Routing == "partition"},
		RingDir: c.RingDir, RingBytes: int64(c.RingMB) << 20, ReleaseTimeout: c.Release, Secret: own,
		MaxSendBytes: msg, Metrics: serve.NewMetrics()})
	if err != nil {
		return err
	}
	ln, err := serve.Listen(c.Listen)
	if err != nil {
		return err
	}
	addr := c.Listen
	if _, unix := serve.UnixPath(c.Listen); !unix {
		addr = ln.Addr().String()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(e.stderr, "strata relay: %s (%d streams each, %s) into rings in %s, serving on %s\n",
		strings.Join(addrs, ", "), c.Streams, c.Routing, c.RingDir, addr)
	return runUntilStopped(e, "strata relay", srv, served, sigs, c.ExitPar, c.Drain, c.RingDir, func() {})
}
