package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/partition"
)

func TestPartitionCommand(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "g")
	if code, _, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny", "--seed", "2"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errOut)
	}
	out := filepath.Join(dir, "p")
	code, stdout, errOut := strata(t, "--quiet", "partition", g, out, "-k", "4", "--balance", "nodes,train")
	if code != 0 {
		t.Fatalf("partition: exit %d: %s", code, errOut)
	}
	if !strings.Contains(stdout, "edge cut:") || !strings.Contains(stdout, "4 parts") {
		t.Errorf("report lacks the cut or part count:\n%s", stdout)
	}
	p, err := partition.ReadFile(filepath.Join(out, "partition.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Book.Offsets()) - 1; got != 4 {
		t.Errorf("book has %d parts, want 4", got)
	}
	if len(p.NewToOld) != 2000 {
		t.Errorf("renumbering covers %d nodes, want 2000", len(p.NewToOld))
	}
	// Bad input: k out of range and an unknown constraint are usage errors, not panics.
	if code, _, errOut := strata(t, "--quiet", "partition", g, filepath.Join(dir, "q"), "-k", "0"); code != 2 || !strings.Contains(errOut, "--parts 0") {
		t.Errorf("k=0: exit %d, %q", code, errOut)
	}
	if code, _, _ := strata(t, "--quiet", "partition", g, filepath.Join(dir, "r"), "--balance", "colour"); code != 2 {
		t.Errorf("unknown constraint: exit %d, want 2", code)
	}
}

// TestPartitionFileForAnotherDataset: a partition file written for another
// dataset of the same size (and name) is refused by train, naming both
// fingerprints; it used to be applied.
func TestPartitionFileForAnotherDataset(t *testing.T) {
	dir := t.TempDir()
	a := genTiny(t, dir, "a", "2")
	b := genTiny(t, dir, "b", "3")
	out := filepath.Join(dir, "pa")
	if code, _, errOut := strata(t, "--quiet", "partition", a, out, "-k", "2"); code != 0 {
		t.Fatalf("partition: exit %d: %s", code, errOut)
	}
	saved, err := partition.ReadFile(filepath.Join(out, partition.FileName))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--quiet", "train", "--mode", "fullgraph", "--devices", "cpu:2", "--epochs", "1", "--partition-file", filepath.Join(out, partition.FileName)}
	if code, _, errOut := strata(t, append(args, "--dataset", a)...); code != 0 {
		t.Fatalf("train with its own partition: exit %d: %s", code, errOut)
	}
	code, _, errOut := strata(t, append(args, "--dataset", b)...)
	if code == 0 || !strings.Contains(errOut, saved.Meta.DatasetFingerprint) || !strings.Contains(errOut, "not v1:") {
		t.Fatalf("train with another dataset's partition: exit %d, %q", code, errOut)
	}
}

// TestPartitionMachinesHotFlags: --hot-bytes sizes the hot rows every
// machine directory holds (auto: one machine's share); bad values and
// use without --machines are usage errors naming the flag.
func TestPartitionMachinesHotFlags(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "g")
	if code, _, errOut := strata(t, "--quiet", "gen", g, "--preset", "tiny", "--seed", "2"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "the 1000 hottest by in-degree (50.0% of 2000)"},
		{[]string{"--hot-bytes", "all", "--hotness", "pagerank"}, "the 2000 hottest by pagerank"},
		{[]string{"--hot-bytes", "0"}, "0 hot rows of other machines"},
	} {
		out := filepath.Join(dir, "m"+strings.Join(tc.flags, ""))
		args := append([]string{"--quiet", "partition", "--machines", "2", g, out}, tc.flags...)
		if code, stdout, errOut := strata(t, args...); code != 0 || !strings.Contains(stdout, tc.want) {
			t.Fatalf("%v: exit %d, want %q in\n%s%s", tc.flags, code, tc.want, stdout, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"partition", g, filepath.Join(dir, "x"), "--hot-bytes", "1MiB"}, "only with --machines"},
		{[]string{"partition", "--machines", "2", g, filepath.Join(dir, "y"), "--hot-bytes", "lots"}, "--hot-bytes"},
		{[]string{"partition", "--machines", "2", g, filepath.Join(dir, "z"), "--hotness", "presample"}, "--hotness"},
	} {
		if code, _, errOut := strata(t, append([]string{"--quiet"}, tc.args...)...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 naming %s", tc.args, code, errOut, tc.want)
		}
	}
}
