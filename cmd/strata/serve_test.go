package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/serve"
	"github.com/strata-gnn/strata/serve/servepb"
)

func TestServeUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"serve"}, "--dataset"},
		{[]string{"serve", "--dataset", "cora", "--listen", "0.0.0.0:7000"}, "mutual TLS is required"},
		{[]string{"serve", "--dataset", "cora", "--listen", "127.0.0.1"}, "--listen"},
		{[]string{"serve", "--dataset", "cora", "--prefetch", "0"}, "--prefetch"},
		{[]string{"serve", "--dataset", "cora", "--max-message-mb", "4096"}, "--max-message-mb"},
		{[]string{"serve", "--dataset", "cora", "--num-nodes", "10"}, "--num-nodes"},
		{[]string{"serve", "--dataset", "cora", "--secret-file", filepath.Join(dir, "none")}, "--secret-file"},
		{[]string{"serve", "--dataset", "cora", "--tls-cert", "x.pem"}, "--tls-key"},
		{[]string{"serve", "--dataset", "cora", "--device", "tpu"}, "tpu"},
	} {
		code, _, stderr := strata(t, c.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || !strings.Contains(stderr, c.says) {
			t.Errorf("%v: exit %d, %q; want 2 naming %s", c.args, code, stderr, c.says)
		}
		if len(lines) != 1 && !strings.Contains(stderr, "Usage:") {
			t.Errorf("%v: %d lines of errors: %q", c.args, len(lines), stderr)
		}
	}
}

// startServe runs `strata serve` in a child process and waits for its
// ready file; it returns the process, the address and the output.
func startServe(t *testing.T, stdin io.Reader, args ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0", "--ready-file", ready}, args...)...)
	cmd.Env = append(os.Environ(), "STRATA_TEST_MAIN=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &out, stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil {
			return cmd, strings.TrimSpace(string(b)), &out
		}
		if time.Now().After(end) {
			t.Fatalf("strata serve did not become ready within 30 s:\n%s", out.String())
		}
	}
}

// waitExit waits up to 30 s for cmd to exit and returns its error.
func waitExit(t *testing.T, cmd *exec.Cmd, out fmt.Stringer) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("strata serve did not exit within 30 s:\n%s", out)
		return nil
	}
}

func TestServeCommand(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, addr, out := startServe(t, nil, "--dataset", "cora", "--device", "cpu", "--secret-file", secret)
	c, err := serve.Dial(addr, serve.ClientOptions{Secret: []byte("hunter2"), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Dataset != "cora" || info.NumNodes != 2708 || info.NumTrain != 140 || info.ServerVersion == "" || info.MaxSendBytes != 512<<20 {
		t.Fatalf("info %+v", info)
	}
	bs, err := c.Sample(context.Background(), &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 32, Fanouts: []int32{10, 5}, WithFeatures: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		b, err := bs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.X.Shape[1] != 1433 {
			t.Fatalf("x shape %v", b.X.Shape)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d batches of 32 from 140 seeds", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, out); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "draining") || !strings.Contains(out.String(), "stopped") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestServeExitsWithParent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd, _, out := startServe(t, r, "--dataset", "cora", "--device", "cpu", "--exit-with-parent")
	r.Close()
	w.Close() // what the kernel does when the parent dies
	if err := waitExit(t, cmd, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "standard input closed") {
		t.Fatalf("output:\n%s", out)
	}
}

// writeNPY writes an int64 array of the given shape.
func writeNPY(t *testing.T, path string, shape string, v []int64) {
	t.Helper()
	h := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': %s, }", shape)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A folder of .npy arrays with only edges (what strata_pyg writes for a
// PyG Data whose features stay in Python), with isolated nodes at the end.
func TestServeNPYNumNodes(t *testing.T) {
	dir := t.TempDir()
	writeNPY(t, filepath.Join(dir, "edge_index.npy"), "(2, 3)", []int64{0, 1, 2, 1, 2, 0})
	cmd, addr, out := startServe(t, nil, "--dataset", dir, "--num-nodes", "10", "--device", "cpu")
	c, err := serve.Dial(addr, serve.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumNodes != 10 || info.NumEdges != 3 || !info.Directed || info.FeatDim != 0 {
		t.Fatalf("info %+v", info)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// --part serves a part of a `strata partition` output, --ring-dir offers
// the shared-memory ring: Info says both.
func TestServePartAndRing(t *testing.T) {
	dir := t.TempDir()
	data, parts := filepath.Join(dir, "tiny"), filepath.Join(dir, "parts")
	for _, args := range [][]string{{"--quiet", "gen", data, "--preset", "tiny"}, {"--quiet", "partition", data, parts, "-k", "2"}} {
		if code, _, stderr := strata(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--dataset", parts, "--part", "2"}, "--part=2: the partition"},
		{[]string{"serve", "--dataset", data, "--part", "0"}, "not an output directory of 'strata partition'"},
		{[]string{"serve", "--dataset", parts, "--part", "0", "--num-nodes", "5"}, "--num-nodes"},
	} {
		code, _, stderr := strata(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.says) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want 2 and one line naming %q", c.args, code, stderr, c.says)
		}
	}
	ring := t.TempDir()
	cmd, addr, out := startServe(t, nil, "--dataset", parts, "--part", "1", "--device", "cpu", "--ring-dir", ring)
	c, err := serve.Dial(addr, serve.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := info.Partition
	if !info.Shm || p == nil || p.Part != 1 || p.NumParts != 2 || len(p.Offsets) != 3 || p.Offsets[2] != 2000 || p.Fingerprint == "" {
		t.Fatalf("info %+v", info)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "owning part 1 of 2") { // read once it exited: the output is written meanwhile
		t.Fatalf("output:\n%s", out)
	}
}

// A typed dataset is served with its types (Info lists them and the
// typed capability); --part does not apply to it.
func TestServeTyped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "het")
	if code, _, stderr := strata(t, "--quiet", "gen", dir, "--preset", "hetero"); code != 0 {
		t.Fatalf("gen: %d %s", code, stderr)
	}
	if code, _, stderr := strata(t, "serve", "--dataset", dir, "--part", "0"); code != 2 || !strings.Contains(stderr, "--part") {
		t.Errorf("typed --part: exit %d, %q", code, stderr)
	}
	cmd, addr, out := startServe(t, nil, "--dataset", dir, "--device", "cpu")
	c, err := serve.Dial(addr, serve.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumNodes != 8000 || len(info.NodeTypes) != 3 || len(info.EdgeTypes) != 4 || info.NodeTypes[0].Name != "paper" ||
		!info.NodeTypes[0].Labeled || !slices.Contains(info.Capabilities, "link") || !slices.Contains(info.Capabilities, "typed") {
		t.Fatalf("info %+v", info)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
