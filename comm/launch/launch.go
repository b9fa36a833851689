// Package launch starts the N local processes of a job with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), on one machine or as one
// machine's share of a job over several (Config.Nodes, NodeRank: one
// launch per machine, as torchrun's --nnodes and --node_rank), and
// supervises them: when one
// fails, the others are stopped (SIGTERM, then SIGKILL after a grace
// period) and the failure is reported naming the rank. On Linux the
// processes also die (SIGKILL) when the launcher itself dies, even by
// SIGKILL, so a killed launcher leaves no ranks behind. This is what
// 'strata launch -n N -- <cmd>' runs.
package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// MaxProcs bounds N.
const MaxProcs = 1024

// Config describes a launch.
type Config struct {
	N       int      // processes (on this machine)
	Command []string // argv of each process
	// Nodes and NodeRank place this launch in a job over several
	// machines, as torchrun's --nnodes and --node_rank: each machine runs
	// one launch of N processes, the same Nodes and MasterAddr:MasterPort
	// (machine 0's address, where rank 0 serves the store), and its own
	// NodeRank; its processes get RANK NodeRank*N+i, WORLD_SIZE Nodes*N,
	// LOCAL_RANK i and LOCAL_WORLD_SIZE N. Nodes 0 means 1. With
	// several nodes MasterPort must be given.
	Nodes, NodeRank int
	// Env is added to this process's environment (after it, so it wins),
	// before the rendezvous variables.
	Env []string
	// PerRank, if set, returns more environment entries for one rank.
	PerRank func(rank int) []string
	// Stdout and Stderr receive the processes' output (os.Stdout and
	// os.Stderr if nil), each line prefixed with "[rank r] " when Prefix
	// is set.
	Stdout, Stderr io.Writer
	Prefix         bool
	// MasterAddr and MasterPort locate rank 0's store (127.0.0.1 and a
	// free port if empty).
	MasterAddr string
	MasterPort int
	// Grace is how long stopped processes get between SIGTERM and SIGKILL
	// (5 s if zero).
	Grace time.Duration
	// ExtraFiles are passed to every process (as fd 3, 4, ...).
	ExtraFiles []*os.File
	// KeepGoing leaves the other processes running when one fails (for
	// testing how the survivors notice). Run still reports the failure.
	KeepGoing bool
	// Auth is passed to every process as STRATA_COMM_* variables
	// (auth.Config.Env), after Env. When MasterAddr is not on loopback, Run
	// first checks that the processes will have what that requires
	// (mutual TLS, or the secret with the trusted-network opt-out), from
	// this environment, Env and Auth together.
	Auth auth.Config
}

// ConfigError is a configuration that cannot work, found before any
// process starts (the security settings); callers treat it as a usage
// error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Usage marks e as a mistake in the command's settings.
func (e *ConfigError) Usage() bool { return true }

// ExitError reports the first process that failed.
type ExitError struct {
	Rank    int
	Err     error // *exec.ExitError, or why it could not start
	Stopped []int // ranks that were still running and were stopped
}

func (e *ExitError) Error() string {
	s := fmt.Sprintf("launch: rank %d failed: %v", e.Rank, e.Err)
	if len(e.Stopped) > 0 {
		s += fmt.Sprintf("; stopped ranks %v", e.Stopped)
	}
	return s
}

func (e *ExitError) Unwrap() error { return e.Err }

// Result is one process's outcome.
type Result struct {
	Rank    int
	Err     error // nil when it exited with status 0
	Stopped bool  // it was stopped because another rank failed (or ctx ended)
	Elapsed time.Duration
}

// Run starts the processes and waits for all of them. It returns nil when
// every process exits with status 0, an *ExitError naming the first
// failure otherwise, or ctx's error if ctx ended first (after stopping
// them all). The per-process results come back either way.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.N < 1 || cfg.N > MaxProcs {
		return nil, fmt.Errorf("launch: -n %d, want 1..%d", cfg.N, MaxProcs)
	}
	if len(cfg.Command) == 0 {
		return nil, errors.New("launch: no command given")
	}
	nodes := max(cfg.Nodes, 1)
	switch {
	case cfg.Nodes < 0 || nodes*cfg.N > rendezvous.MaxWorldSize:
		return nil, &ConfigError{fmt.Errorf("launch: --nnodes %d with -n %d: want a job of 1..%d processes", cfg.Nodes, cfg.N, rendezvous.MaxWorldSize)}
	case cfg.NodeRank < 0 || cfg.NodeRank >= nodes:
		return nil, &ConfigError{fmt.Errorf("launch: --node-rank %d, want 0..%d (--nnodes %d)", cfg.NodeRank, nodes-1, nodes)}
	case nodes > 1 && cfg.MasterPort == 0:
		return nil, &ConfigError{fmt.Errorf("launch: --nnodes %d needs --master-port (the same on every machine) and --master-addr (machine 0's address)", nodes)}
	}
	first := cfg.NodeRank * cfg.N // global rank of this machine's first process
	addr := cfg.MasterAddr
	if addr == "" {
		addr = "127.0.0.1"
	}
	extra := append(append([]string(nil), cfg.Env...), cfg.Auth.Env()...)
	if err := checkSecurity(addr, extra); err != nil {
		return nil, &ConfigError{err}
	}
	port := cfg.MasterPort
	if port == 0 {
		var err error
		if port, err = rendezvous.FreePort(addr); err != nil {
			return nil, fmt.Errorf("launch: finding a free port on %s: %w", addr, err)
		}
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	var outMu sync.Mutex // whole lines from different ranks never interleave

	type proc struct {
		cmd       *exec.Cmd
		out, errw *prefixWriter
		start     time.Time
		done      chan struct{}
		err       error
		stopped   bool
	}
	st := newStarter()
	defer st.close() // after every process has exited: Run waits for them all
	procs := make([]*proc, cfg.N)
	results := make([]Result, cfg.N)
	events := make(chan int, cfg.N)
	var mu sync.Mutex // guards proc.stopped
	stopAll := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var stopped []int
		for r, p := range procs {
			if p == nil || p.cmd.Process == nil {
				continue
			}
			select {
			case <-p.done:
				continue
			default:
			}
			p.stopped = true
			stopped = append(stopped, first+r)
			p.cmd.Process.Signal(syscall.SIGTERM)
			go func() {
				select {
				case <-p.done:
				case <-time.After(grace):
					p.cmd.Process.Kill()
				}
			}()
		}
		return stopped
	}

	for r := 0; r < cfg.N; r++ {
		env := rendezvous.Env{Rank: first + r, WorldSize: nodes * cfg.N, LocalRank: r, LocalWorldSize: cfg.N, MasterAddr: addr, MasterPort: port}
		cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
		cmd.Env = append(append(os.Environ(), extra...), env.Vars()...)
		if cfg.PerRank != nil {
			cmd.Env = append(cmd.Env, cfg.PerRank(first+r)...)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		p.out = &prefixWriter{w: stdout, mu: &outMu}
		p.errw = &prefixWriter{w: stderr, mu: &outMu}
		if cfg.Prefix {
			p.out.prefix = []byte(fmt.Sprintf("[rank %d] ", first+r))
			p.errw.prefix = p.out.prefix
		}
		cmd.Stdout, cmd.Stderr = p.out, p.errw
		cmd.ExtraFiles = cfg.ExtraFiles
		cmd.WaitDelay = grace // a grandchild holding the output open cannot hang Wait
		dieWithParent(cmd)
		p.start = time.Now()
		if err := st.start(cmd); err != nil {
			stopped := stopAll()
			for _, q := range procs[:r] {
				<-q.done
			}
			return nil, &ExitError{Rank: first + r, Err: err, Stopped: stopped}
		}
		procs[r] = p
		go func() {
			p.err = cmd.Wait()
			p.out.flush()
			p.errw.flush()
			close(p.done)
			events <- r
		}()
	}

	var failed *ExitError
	var ctxErr error
	ctxDone := ctx.Done()
	for left := cfg.N; left > 0; {
		select {
		case r := <-events:
			left--
			p := procs[r]
			mu.Lock()
			stopped := p.stopped
			mu.Unlock()
			results[r] = Result{Rank: first + r, Err: p.err, Stopped: stopped, Elapsed: time.Since(p.start)}
			if p.err != nil && !stopped && failed == nil && ctxErr == nil {
				failed = &ExitError{Rank: first + r, Err: p.err}
				if !cfg.KeepGoing {
					failed.Stopped = stopAll()
				}
			}
		case <-ctxDone:
			ctxDone = nil
			ctxErr = ctx.Err()
			stopAll()
		}
	}
	if failed != nil {
		sort.Ints(failed.Stopped)
		return results, failed
	}
	if ctxErr != nil {
		return results, fmt.Errorf("launch: %w", ctxErr)
	}
	return results, nil
}

// checkSecurity fails, before anything starts, when the processes'
// environment (this one plus extra) names TLS files that do not load, or,
// off loopback, lacks what the store and the TCP transport require there.
func checkSecurity(addr string, extra []string) error {
	vars := map[string]string{}
	for _, kv := range append(os.Environ(), extra...) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	c, err := auth.ConfigFromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	sec, err := c.Security()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	// The files are loaded on loopback too: a half-given or unreadable
	// TLS setting is a mistake to report before the ranks start.
	if auth.IsLoopback(addr) || sec.Check("launch", addr) == nil {
		return nil
	}
	if c.InsecureTrustedNetwork {
		return fmt.Errorf("launch: --insecure-trusted-network (%s=1) still needs the shared secret: set %s, the same for every rank", auth.EnvInsecure, auth.EnvSecret)
	}
	return fmt.Errorf("launch: --master-addr %s is not on loopback, so the ranks need mutual TLS: give --tls-cert, --tls-key and --tls-ca (or set %s, %s and %s); "+
		"on a trusted network only, set %s and pass --insecure-trusted-network instead", addr, auth.EnvTLSCert, auth.EnvTLSKey, auth.EnvTLSCA, auth.EnvSecret)
}

// starter starts processes from one goroutine locked to its OS thread
// until close. The parent-death signal (dieWithParent) fires when the
// thread that forked the child exits, not the process: a thread that
// went back to the runtime's pool could be ended later (the runtime ends
// the thread of a goroutine that exits while locked to it), killing
// healthy ranks. A thread locked to a goroutine blocked here lives until
// close.
type starter struct {
	reqs chan startReq
	done chan struct{}
}

type startReq struct {
	cmd *exec.Cmd
	err chan error
}

func newStarter() *starter {
	s := &starter{reqs: make(chan startReq), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(s.done)
		for r := range s.reqs {
			r.err <- r.cmd.Start()
		}
	}()
	return s
}

func (s *starter) start(cmd *exec.Cmd) error {
	r := startReq{cmd: cmd, err: make(chan error, 1)}
	s.reqs <- r
	return <-r.err
}

// close ends the goroutine; call it once every started process has
// exited.
func (s *starter) close() {
	close(s.reqs)
	<-s.done
}

// prefixWriter forwards whole lines, each with a prefix.
type prefixWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix []byte
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.emit(p.buf[:i+1])
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a very long line: pass it on in pieces
		p.emit(p.buf)
		p.buf = nil
	}
	return len(b), nil
}

func (p *prefixWriter) emit(line []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.prefix) > 0 {
		p.w.Write(append(append([]byte(nil), p.prefix...), line...))
		return
	}
	p.w.Write(line)
}

func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.emit(append(p.buf, '\n'))
		p.buf = nil
	}
}
