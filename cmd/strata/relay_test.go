package main

import (
	"strings"
	"testing"
)

func TestRelayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"relay", "--ring-dir", dir}, "--upstream"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077"}, "--ring-dir"},
		{[]string{"relay", "--upstream", "nohost", "--ring-dir", dir}, "--upstream"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077,,", "--ring-dir", dir}, "--upstream"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077", "--ring-dir", dir + "/none"}, "--ring-dir"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077", "--ring-dir", dir, "--listen", "0.0.0.0:7000"}, "loopback"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077", "--ring-dir", dir, "--routing", "random"}, "--routing"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077", "--ring-dir", dir, "--tls-cert", "x.pem"}, "--tls-key"},
		{[]string{"relay", "--upstream", "127.0.0.1:7077", "--ring-dir", dir, "--upstream-secret-file", dir + "/none"}, "--upstream-secret-file"},
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
