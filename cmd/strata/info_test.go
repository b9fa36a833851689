package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
)

// genTiny writes a small generated dataset and returns its directory.
func genTiny(t *testing.T, dir, name, seed string) string {
	t.Helper()
	g := filepath.Join(dir, name)
	if code, _, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny", "--nodes", "600", "--seed", seed); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errOut)
	}
	return g
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestInfoVerifies: 'strata info DIR' verifies the dataset as train's open
// does and fails with the same one-line error (it used to exit 0 on a
// dataset that train refuses); --fast summarizes the manifest only.
func TestInfoVerifies(t *testing.T) {
	g := genTiny(t, t.TempDir(), "g", "4")
	code, out, errOut := strata(t, "info", g)
	if code != 0 || !strings.Contains(out, "nodes       600") || !strings.Contains(out, "verified    checksums") {
		t.Fatalf("info on a good dataset: exit %d, %s\n%s", code, errOut, out)
	}
	// Flip one byte of the features.
	p := filepath.Join(g, "features.bin")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, infoErr := strata(t, "info", g)
	if code != 1 || !strings.Contains(infoErr, "features.bin: at byte 0: checksum mismatch") {
		t.Fatalf("info on a corrupted dataset: exit %d, %q", code, infoErr)
	}
	tcode, _, trainErr := strata(t, "--quiet", "train", "--dataset", g, "--epochs", "1")
	if tcode == 0 || lastLine(trainErr) != lastLine(infoErr) {
		t.Errorf("train: exit %d, %q; info said %q", tcode, lastLine(trainErr), lastLine(infoErr))
	}
	if strings.Count(strings.TrimSpace(infoErr), "\n") != 0 {
		t.Errorf("info's error is not one line: %q", infoErr)
	}
	code, out, errOut = strata(t, "info", "--fast", g)
	if code != 0 || !strings.Contains(out, "nodes       600") || !strings.Contains(out, "verified    no (--fast") {
		t.Fatalf("info --fast: exit %d, %s\n%s", code, errOut, out)
	}
	if code, _, errOut := strata(t, "info", "--fast", "cora"); code != 2 || !strings.Contains(errOut, "--fast needs a Strata dataset directory") {
		t.Errorf("info --fast cora: exit %d, %q", code, errOut)
	}
}

// TestDatasetPathErrors: a manifest that cannot be examined, or that is
// truncated or a FIFO, is reported with its path and cause, by info and
// train alike.
func TestDatasetPathErrors(t *testing.T) {
	dir := t.TempDir()
	loop := genTiny(t, dir, "loop", "5")
	manifest := filepath.Join(loop, "manifest.json")
	os.Remove(manifest)
	if err := os.Symlink("other", manifest); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("manifest.json", filepath.Join(loop, "other")); err != nil {
		t.Fatal(err)
	}
	trunc := genTiny(t, dir, "trunc", "6")
	if err := os.Truncate(filepath.Join(trunc, "manifest.json"), 100); err != nil {
		t.Fatal(err)
	}
	fifo := genTiny(t, dir, "fifo", "7")
	fifoPath := filepath.Join(fifo, "manifest.json")
	testkit.Mkfifo(t, fifoPath)
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{loop, []string{manifest, "too many levels of symbolic links"}},
		{trunc, []string{filepath.Join(trunc, "manifest.json") + ": at byte 100", "truncated"}},
		{fifo, []string{fifoPath, "not a regular file (named pipe"}},
	} {
		for _, args := range [][]string{{"info", c.dir}, {"--quiet", "train", "--dataset", c.dir, "--epochs", "1"}} {
			testkit.NoBlock(t, "strata "+strings.Join(args, " "), func() {
				code, _, errOut := strata(t, args...)
				if code == 0 {
					t.Errorf("%v: exit 0", args)
				}
				for _, w := range c.want {
					if !strings.Contains(errOut, w) {
						t.Errorf("%v: %q lacks %q", args, errOut, w)
					}
				}
				if strings.Contains(errOut, "cannot tell the layout") {
					t.Errorf("%v: %q", args, errOut)
				}
			}, fifoPath)
		}
	}
	t.Run("unreadable directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: permission bits do not stop root, so EACCES cannot be produced")
		}
		g := genTiny(t, t.TempDir(), "locked", "8")
		if err := os.Chmod(g, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(g, 0o755)
		code, _, errOut := strata(t, "info", g)
		if code == 0 || !strings.Contains(errOut, g) || !strings.Contains(errOut, "permission denied") {
			t.Errorf("info on an unreadable directory: exit %d, %q", code, errOut)
		}
	})
}

// TestConfigErrors: a bad value in a config file names the file, the line
// and the key, shows at most a short escaped excerpt of the value, and
// exits 2; a FIFO as the config is refused without blocking.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	huge := strings.Repeat("9", 100000)
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"type.yaml", "model: gcn\nepochs: abc\n", []string{"type.yaml: line 2: key \"epochs\": expected a valid 64 bit int but got \"abc\""}},
		{"huge.yaml", "epochs: " + huge + "\n", []string{"huge.yaml: line 1: key \"epochs\"", "(100000 bytes)"}},
		{"enum.yaml", "model: \"gcn\\x1b[31m\"\n", []string{"enum.yaml: line 1: key \"model\": want one of gcn, sage, gat, rgcn, hsage, got \"gcn\\x1b[31m\""}},
		{"list.yaml", "fanouts: [5, \"" + strings.Repeat("a", 5000) + "\"]\n", []string{"list.yaml: line 1: key \"fanouts\"", "(5000 bytes)"}},
		{"key.yaml", strings.Repeat("k", 1000) + ": 1\n", []string{"key.yaml: line 1: unknown key \"kkkk", "(1000 bytes)"}},
	} {
		p := write(c.name, c.text)
		code, _, errOut := strata(t, "--config", p, "train", "--epochs", "1")
		if code != 2 {
			t.Errorf("%s: exit %d, want 2: %q", c.name, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: %q lacks %q", c.name, errOut, w)
			}
		}
		if len(errOut) > 1000 || strings.ContainsRune(errOut, 0x1b) {
			t.Errorf("%s: the error echoes the input (%d bytes): %.300q", c.name, len(errOut), errOut)
		}
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	testkit.Mkfifo(t, fifo)
	testkit.NoBlock(t, "strata --config FIFO", func() {
		code, _, errOut := strata(t, "--config", fifo, "train")
		if code != 2 || !strings.Contains(errOut, fifo) || !strings.Contains(errOut, "named pipe") {
			t.Errorf("FIFO config: exit %d, %q", code, errOut)
		}
	}, fifo)
}
