//go:build linux

package launch_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/commtest"
)

// alive reports whether pid exists and is not a zombie (an orphan's
// zombie may linger where PID 1 does not reap).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return !(i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X'))
}

// TestLauncherKilled: a launcher killed with SIGKILL takes its ranks with
// it (the parent-death signal).
func TestLauncherKilled(t *testing.T) {
	cmd := exec.Command(commtest.Command()[0], commtest.Command()[1:]...)
	cmd.Env = append(os.Environ(), role("launcher")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()

	// Both ranks say who they are.
	pids := make(chan int)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "pid" {
				if p, err := strconv.Atoi(f[1]); err == nil {
					pids <- p
				}
			}
		}
		close(pids)
	}()
	var ranks []int
	timeout := time.After(30 * time.Second)
	for len(ranks) < 2 {
		select {
		case p, ok := <-pids:
			if !ok {
				t.Fatalf("the launcher's output ended after %d of 2 ranks started", len(ranks))
			}
			ranks = append(ranks, p)
		case <-timeout:
			t.Fatalf("only %d of 2 ranks started within 30 s", len(ranks))
		}
	}
	defer func() {
		for _, p := range ranks {
			syscall.Kill(p, syscall.SIGKILL) // whatever the outcome, leave nothing behind
		}
	}()

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		for _, p := range ranks {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks (pids %v) still run 10 s after their launcher was killed", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
