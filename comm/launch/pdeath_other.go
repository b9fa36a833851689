//go:build !linux

package launch

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal,
// so the ranks outlive a launcher that is killed with SIGKILL.
func dieWithParent(cmd *exec.Cmd) {}
