package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// outputModes are the training paths that write --report and --plot.
var outputModes = map[string][]string{
	"sampled":   {"--epochs", "1"},
	"full":      {"--epochs", "1", "--model", "gcn", "--mode", "full"},
	"fullgraph": {"--epochs", "1", "--model", "gcn", "--mode", "fullgraph", "--devices", "cpu:2"},
	"dsp":       {"--epochs", "1", "--devices", "cpu:2"},
}

// TestOutputsCheckedBeforeTraining: a --report or --plot that cannot be
// written (a directory, a file under a regular file, a format that is
// not drawn) is a usage error naming it before any training, in every
// mode (it used to fail after the last epoch). These fail as root too.
// (A missing directory is created, as before: TestTrainDevicesCPU.)
func TestOutputsCheckedBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "file"), "x")
	for _, tc := range []struct{ flag, path, want string }{
		{"--report", dir, dir + " is a directory, not a file"},
		{"--report", filepath.Join(file, "r.json"), file + " is not a directory"},
		{"--report", filepath.Join(file, "sub", "r.json"), "cannot reach directory " + filepath.Join(file, "sub") + ": not a directory"},
		{"--plot", dir, dir + " is a directory, not a file"},
		{"--plot", filepath.Join(file, "p.png"), file + " is not a directory"},
		{"--plot", filepath.Join(dir, "p.jpg"), `unknown image format ".jpg"`},
	} {
		for name, mode := range outputModes {
			args := append([]string{"--quiet", "train", tc.flag, tc.path}, mode...)
			code, out, errOut := strata(t, args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "strata: "+tc.flag+": ") || !strings.Contains(errOut, tc.want) ||
				strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s %s %s: exit %d, stdout %q, stderr %q; want exit 2 before training, naming %q", name, tc.flag, tc.path, code, out, errOut, tc.want)
			}
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the checks left files behind: %v", ents)
	}
}

// TestOutputsWriteFailureAfterResults: when the report and the plot
// cannot be written at the end (here: a file size limit of 512 bytes,
// as a full disk), the results are on stdout all the same and the run
// exits 1 naming the files, leaving neither a partial file nor a
// temporary one.
func TestOutputsWriteFailureAfterResults(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to set a file size limit")
	}
	for name, mode := range outputModes {
		dir := t.TempDir()
		rep, plot := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.png")
		args := append([]string{"-c", `ulimit -f 1 && exec "$0" "$@"`, os.Args[0], "--quiet", "train", "--report", rep, "--plot", plot}, mode...)
		cmd := exec.Command(sh, args...)
		cmd.Env = append(os.Environ(), "STRATA_TEST_MAIN=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: %v, want exit 1; stdout %q stderr %q", name, err, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "test accuracy") {
			t.Errorf("%s: the results are not on stdout: %q", name, out.String())
		}
		e := errb.String()
		if strings.Count(e, "\n") != 1 || !strings.Contains(e, "--report: ") || !strings.Contains(e, rep) ||
			!strings.Contains(e, "--plot: ") || !strings.Contains(e, plot) {
			t.Errorf("%s: stderr %q; want one line naming %s and %s", name, e, rep, plot)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s: left %v behind", name, ents)
		}
	}
}
