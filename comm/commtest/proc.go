package commtest

import (
	"fmt"
	"os"
	"testing"
)

// RoleEnv selects a child role when a test binary re-executes itself.
const RoleEnv = "STRATA_COMMTEST_ROLE"

// Main is called from a test package's TestMain. In a child process
// (RoleEnv set) it runs that role and exits: status 0 if the role returns
// nil, 1 after printing its error otherwise. Otherwise it runs the tests.
func Main(m *testing.M, roles map[string]func() error) {
	if role := os.Getenv(RoleEnv); role != "" {
		f := roles[role]
		if f == nil {
			fmt.Fprintf(os.Stderr, "commtest: unknown role %q\n", role)
			os.Exit(2)
		}
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "role %s rank %s: %v\n", role, os.Getenv("RANK"), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Command is the argv that re-executes the running test binary without
// running any test (TestMain then dispatches on RoleEnv).
func Command() []string { return []string{os.Args[0], "-test.run=^$"} }
