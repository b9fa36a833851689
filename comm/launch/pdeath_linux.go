//go:build linux

package launch

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel send cmd SIGKILL when the launcher dies,
// however it dies (SIGKILL included): with the launcher gone nobody would
// stop the other ranks when one fails, nor escalate a SIGTERM, so the
// ranks go at once. The signal is tied to the thread that started the
// process, not to the process: Run starts every child from one goroutine
// locked to its thread until all children have exited (see starter).
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
