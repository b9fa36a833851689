package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

func TestMain(m *testing.M) {
	commtest.Main(m, map[string]func() error{
		"env": func() error {
			e, err := rendezvous.FromEnv()
			if err != nil {
				return err
			}
			fmt.Printf("rank=%d world=%d local=%d/%d master=%s\n", e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize, e.Addr())
			fmt.Print("partial line without newline")
			return nil
		},
		"fail": func() error {
			e, _ := rendezvous.FromEnv()
			if e.Rank == 1 {
				time.Sleep(100 * time.Millisecond)
				os.Exit(3)
			}
			time.Sleep(30 * time.Second) // must be stopped
			return nil
		},
		"sleeper": func() error {
			fmt.Printf("pid %d\n", os.Getpid())
			time.Sleep(60 * time.Second) // until killed
			return nil
		},
		// A launcher of two sleepers, killed by the test.
		"launcher": func() error {
			_, err := launch.Run(context.Background(), launch.Config{N: 2, Command: commtest.Command(), Env: role("sleeper")})
			return err
		},
		// Joins the store with the security the environment gives
		// (STRATA_COMM_*), as comm/dist does.
		"join": func() error {
			e, err := rendezvous.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, sec, err := rendezvous.JoinEnv(ctx, e, nil)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.Barrier(ctx, "done"); err != nil {
				return err
			}
			fmt.Printf("joined tls=%v\n", sec.TLS != nil)
			return nil
		},
		"stubborn": func() error {
			// Ignores SIGTERM: must be killed after the grace period.
			signal.Ignore(syscall.SIGTERM)
			e, _ := rendezvous.FromEnv()
			if e.Rank == 0 {
				time.Sleep(100 * time.Millisecond)
				return errors.New("rank 0 gives up")
			}
			time.Sleep(30 * time.Second)
			return nil
		},
	})
}

func role(r string) []string { return []string{commtest.RoleEnv + "=" + r} }

func TestEnv(t *testing.T) {
	var out bytes.Buffer
	res, err := launch.Run(context.Background(), launch.Config{N: 3, Command: commtest.Command(), Env: role("env"), Stdout: &out, Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("output:\n%s", out.String())
	}
	for r := 0; r < 3; r++ {
		want := fmt.Sprintf("[rank %d] rank=%d world=3 local=%d/3 master=127.0.0.1:", r, r, r)
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
		if !strings.Contains(out.String(), fmt.Sprintf("[rank %d] partial line without newline", r)) {
			t.Errorf("rank %d's unterminated line lost:\n%s", r, out.String())
		}
	}
}

// TestNodes: machine 1 of a job of 2 machines x 2 processes gives its
// processes ranks 2 and 3 of 4, local ranks 0 and 1; bad node settings
// are refused before anything starts.
func TestNodes(t *testing.T) {
	var out bytes.Buffer
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := launch.Run(context.Background(), launch.Config{N: 2, Nodes: 2, NodeRank: 1, MasterPort: port, Command: commtest.Command(),
		Env: role("env"), Stdout: &out, Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		want := fmt.Sprintf("[rank %d] rank=%d world=4 local=%d/2 master=127.0.0.1:%d", 2+i, 2+i, i, port)
		if r.Rank != 2+i || !strings.Contains(out.String(), want) {
			t.Errorf("result %+v; missing %q in:\n%s", r, want, out.String())
		}
	}
	for _, c := range []struct {
		cfg  launch.Config
		want string
	}{
		{launch.Config{N: 2, Nodes: 2, NodeRank: 2, MasterPort: port}, "--node-rank 2, want 0..1"},
		{launch.Config{N: 2, Nodes: -1}, "--nnodes -1"},
		{launch.Config{N: 2, Nodes: 2}, "needs --master-port"},
	} {
		c.cfg.Command = []string{"true"}
		_, err := launch.Run(context.Background(), c.cfg)
		var ce *launch.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a ConfigError naming %q", c.cfg, err, c.want)
		}
	}
}

func TestFailureStopsOthers(t *testing.T) {
	start := time.Now()
	res, err := launch.Run(context.Background(), launch.Config{N: 3, Command: commtest.Command(), Env: role("fail"), Stderr: &bytes.Buffer{}})
	var ee *launch.ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || fmt.Sprint(ee.Stopped) != "[0 2]" {
		t.Fatalf("got %v, want rank 1 failed, ranks [0 2] stopped", err)
	}
	if !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("error %q should give the exit status", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v", el)
	}
	if !res[0].Stopped || res[1].Stopped || !res[2].Stopped {
		t.Errorf("results %+v", res)
	}
}

func TestStubbornIsKilled(t *testing.T) {
	start := time.Now()
	_, err := launch.Run(context.Background(), launch.Config{N: 2, Command: commtest.Command(), Env: role("stubborn"), Stderr: &bytes.Buffer{}, Grace: 300 * time.Millisecond})
	var ee *launch.ExitError
	if !errors.As(err, &ee) || ee.Rank != 0 {
		t.Fatalf("got %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v: SIGKILL after the grace period did not happen", el)
	}
}

func TestContextStopsAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := launch.Run(ctx, launch.Config{N: 2, Command: commtest.Command(), Env: role("fail"), Stderr: &bytes.Buffer{}, KeepGoing: true})
	if err == nil {
		t.Fatal("no error")
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v", el)
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := launch.Run(context.Background(), launch.Config{N: 0, Command: []string{"true"}}); err == nil {
		t.Error("N=0 accepted")
	}
	if _, err := launch.Run(context.Background(), launch.Config{N: 1}); err == nil {
		t.Error("empty command accepted")
	}
	_, err := launch.Run(context.Background(), launch.Config{N: 2, Command: []string{"/nonexistent/strata-test-binary"}})
	var ee *launch.ExitError
	if !errors.As(err, &ee) || ee.Rank != 0 {
		t.Errorf("missing binary: %v", err)
	}
}

// TestSecurity: with --master-addr off loopback the launcher refuses to
// start ranks that lack mutual TLS, naming the flags; the TLS files given
// in Config.Auth reach every rank, which join the store over mutual TLS.
func TestSecurity(t *testing.T) {
	for _, k := range []string{auth.EnvSecret, auth.EnvTLSCert, auth.EnvTLSKey, auth.EnvTLSCA, auth.EnvTLSName, auth.EnvInsecure} {
		t.Setenv(k, "")
	}
	var out bytes.Buffer
	_, err := launch.Run(context.Background(), launch.Config{N: 2, Command: commtest.Command(), Env: role("env"), Stdout: &out,
		MasterAddr: "10.1.2.3", MasterPort: 29500})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert") || out.Len() > 0 {
		t.Fatalf("non-loopback master without TLS: %v (output %q); want a refusal naming --tls-cert before any rank starts", err, out.String())
	}
	_, err = launch.Run(context.Background(), launch.Config{N: 2, Command: commtest.Command(), Env: append(role("env"), auth.EnvSecret+"=k"),
		MasterAddr: "10.1.2.3", MasterPort: 29500})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("non-loopback master with a secret alone: %v", err)
	}

	ca, cert, key, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := auth.Config{TLSCert: filepath.Join(dir, "node.pem"), TLSKey: filepath.Join(dir, "node.key"), TLSCA: filepath.Join(dir, "ca.pem")}
	for p, b := range map[string][]byte{c.TLSCert: cert, c.TLSKey: key, c.TLSCA: ca} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// On loopback too, TLS files that do not load are refused before any
	// rank starts: a certificate alone, and a missing file.
	for _, bad := range []auth.Config{{TLSCert: c.TLSCert}, {TLSCert: filepath.Join(dir, "missing.pem"), TLSKey: c.TLSKey, TLSCA: c.TLSCA}} {
		out.Reset()
		_, err = launch.Run(context.Background(), launch.Config{N: 2, Command: commtest.Command(), Env: role("env"), Auth: bad, Stdout: &out})
		if err == nil || out.Len() > 0 {
			t.Fatalf("loopback with TLS settings %+v: %v (output %q); want a refusal before any rank starts", bad, err, out.String())
		}
	}
	out.Reset()
	_, err = launch.Run(context.Background(), launch.Config{N: 3, Command: commtest.Command(), Env: role("join"), Auth: c, Stdout: &out, Stderr: &out})
	if err != nil || strings.Count(out.String(), "joined tls=true") != 3 {
		t.Fatalf("ranks with mutual TLS: %v\n%s", err, out.String())
	}
}
