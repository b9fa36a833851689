package importer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/internal/regfile"
	"github.com/strata-gnn/strata/internal/testkit"
)

// editMeta rewrites dir/meta.json through a generic map.
func editMeta(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "meta.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSharedMetaMustAgreeWithFiles: meta.json's counts and file list must
// agree; nothing listed is dropped silently (num_classes 0 with labels.bin
// used to drop the labels and the splits).
func TestSharedMetaMustAgreeWithFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"labels with num_classes 0", func(m map[string]any) { m["num_classes"] = 0 },
			"lists labels.bin but num_classes is 0: num_classes must cover the labels"},
		{"num_classes without labels", func(m map[string]any) { delete(m["files"].(map[string]any), "labels.bin") },
			"num_classes is 2 but no labels.bin is listed"},
		{"features with feat_dim 0", func(m map[string]any) { m["feat_dim"] = 0 },
			"lists features.bin but feat_dim is 0"},
		{"splits without labels", func(m map[string]any) {
			m["num_classes"] = 0
			delete(m["files"].(map[string]any), "labels.bin")
		}, "lists train.idx but no labels.bin"},
		{"labels that num_classes does not cover", func(m map[string]any) { m["num_classes"] = 1 },
			"label 1 of node 1 out of range [-1, 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := sharedFixture(t)
			editMeta(t, dir, c.edit)
			d, err := LoadShared(dir, Options{Quiet: true})
			if err == nil {
				t.Fatalf("loaded: %d classes, labels %v, train %v", d.NumClasses, d.Labels, d.Train)
			}
			wantErr(t, err, c.want)
		})
	}
}

// TestOGBStatedCounts: every count the OGB layout states is checked
// against what is read (an empty edge.csv.gz used to give 0 edges although
// num-edge-list.csv.gz said 18736).
func TestOGBStatedCounts(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		dir := filepath.Join(t.TempDir(), "ogbn-x")
		for k, v := range files {
			writeFile(t, dir, "raw/"+k+".gz", []byte(v))
		}
		return dir
	}
	t.Run("empty edge file", func(t *testing.T) {
		dir := write(t, map[string]string{"edge.csv": "", "num-node-list.csv": "2708\n", "num-edge-list.csv": "18736\n"})
		_, err := LoadOGB(dir, Options{Quiet: true})
		wantErr(t, err, "raw/edge.csv.gz", "has 0 edges", "num-edge-list.csv.gz says 18736")
	})
	t.Run("one edge short", func(t *testing.T) {
		dir := write(t, map[string]string{"edge.csv": "0,1\n", "num-edge-list.csv": "2\n"})
		_, err := LoadOGB(dir, Options{Quiet: true})
		wantErr(t, err, "edge.csv.gz", "has 1 edges", "says 2")
	})
	t.Run("counts agree", func(t *testing.T) {
		dir := write(t, map[string]string{"edge.csv": "0,1\n1,2\n", "num-node-list.csv": "3\n", "num-edge-list.csv": "2\n"})
		if _, err := LoadOGB(dir, Options{Quiet: true}); err != nil {
			t.Fatal(err)
		}
	})
	for name, c := range map[string]struct{ content, want string }{
		"empty count":     {"", "num-edge-list.csv.gz: empty: no edge count"},
		"bad count":       {"many\n", "num-edge-list.csv.gz:1:1: bad edge count \"many\""},
		"several graphs":  {"1\n1\n", "num-edge-list.csv.gz:2: several graphs"},
		"negative count":  {"-1\n", "bad edge count \"-1\""},
		"node list empty": {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			files := map[string]string{"edge.csv": "0,1\n", "num-edge-list.csv": c.content}
			want := c.want
			if want == "" { // the node count file instead
				files = map[string]string{"edge.csv": "0,1\n", "num-node-list.csv": c.content}
				want = "num-node-list.csv.gz: empty: no node count"
			}
			_, err := LoadOGB(write(t, files), Options{Quiet: true})
			wantErr(t, err, want)
		})
	}
}

// TestSNAPWeights: a third field is the edge weight, on every line or on
// none; a fourth field is refused (it used to be ignored silently).
func TestSNAPWeights(t *testing.T) {
	p := writeFile(t, t.TempDir(), "w.txt", []byte("# weighted\n0 1 0.5\n1 2 2\n0 1 0.25\n2\t0\t-1e-3\n"))
	d, err := LoadSNAP(p, Options{Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	// The duplicate 0->1 is coalesced with its weights summed.
	checkCSR(t, d.Graph, 3, []int64{0, 1, 2, 3}, []int32{1, 2, 0})
	if want := []float32{0.75, 2, -1e-3}; !reflect.DeepEqual(d.Graph.Weights, want) {
		t.Fatalf("weights %v, want %v", d.Graph.Weights, want)
	}
	s, err := LoadSNAP(p, Options{Quiet: true, Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCSR(t, s.Graph, 3, []int64{0, 2, 4, 6}, []int32{1, 2, 0, 2, 0, 1})
	if want := []float32{0.75, -1e-3, 0.75, 2, -1e-3, 2}; !reflect.DeepEqual(s.Graph.Weights, want) {
		t.Fatalf("symmetrized weights %v, want %v", s.Graph.Weights, want)
	}
	if u, err := LoadSNAP(writeFile(t, t.TempDir(), "u.txt", []byte("0 1\n1 2\n")), Options{Quiet: true}); err != nil || u.Graph.Weights != nil {
		t.Fatalf("unweighted list: weights %v, %v", u.Graph.Weights, err)
	}
	for _, c := range []struct{ text, want string }{
		{"0 1 3\n\n# c\n1 2\n", "e.txt:4: 2 fields, but line 1 has 3"},
		{"0 1\n1 2 3\n", "e.txt:2: 3 fields, but line 1 has 2"},
		{"0 1 3 4\n", "e.txt:1:7: more than 3 fields"},
		{"0 1 nan\n", "e.txt:1:5: field 3: want a finite edge weight, got \"nan\""},
		{"0 1 1e39\n", "e.txt:1:5: field 3"},
		{"0 x 1\n", "e.txt:1:3: field 2: want an integer node ID"},
	} {
		_, err := LoadSNAP(writeFile(t, t.TempDir(), "e.txt", []byte(c.text)), Options{Quiet: true})
		wantErr(t, err, c.want)
	}
}

// TestImportersRefuseFIFO: a FIFO in place of any input file is refused at
// once, naming it, instead of blocking the import forever (or, for
// optional files, being skipped as if absent).
func TestImportersRefuseFIFO(t *testing.T) {
	ogb := func(t testing.TB) string {
		dir := filepath.Join(t.TempDir(), "ogbn")
		writeFile(t, dir, "raw/edge.csv.gz", []byte("0,1\n1,0\n"))
		writeFile(t, dir, "raw/num-node-list.csv.gz", []byte("2\n"))
		writeFile(t, dir, "raw/num-edge-list.csv.gz", []byte("2\n"))
		writeFile(t, dir, "raw/node-feat.csv.gz", []byte("1,2\n3,4\n"))
		return dir
	}
	npy := func(t testing.TB) string {
		dir := filepath.Join(t.TempDir(), "np")
		writeFile(t, dir, "edge_index.npy", npyBytes("<i4", []int64{2, 1}, le([]int32{0, 1})))
		writeFile(t, dir, "features.npy", npyBytes("<f4", []int64{2, 1}, le([]float32{1, 2})))
		return dir
	}
	for _, c := range []struct {
		name  string
		setup func(t testing.TB) string // returns the source
		fifo  string                    // relative to the source ("" = the source itself)
	}{
		{"shared meta.json", sharedFixture, "meta.json"},
		{"shared edges", sharedFixture, "edges.bin.gz"},
		{"shared labels", sharedFixture, "labels.bin.gz"},
		{"ogb edges", ogb, "raw/edge.csv.gz"},
		{"ogb edge count", ogb, "raw/num-edge-list.csv.gz"},
		{"ogb features", ogb, "raw/node-feat.csv.gz"},
		{"npy edges", npy, "edge_index.npy"},
		{"npy features", npy, "features.npy"},
		{"snap file", func(t testing.TB) string { return filepath.Join(t.TempDir(), "g.txt") }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := c.setup(t)
			p := filepath.Join(src, c.fifo)
			testkit.Mkfifo(t, p)
			testkit.NoBlock(t, "importer.Load", func() {
				_, err := Load("", src, Options{Quiet: true})
				if !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "named pipe") {
					t.Errorf("Load with a FIFO %s: %v", p, err)
				}
			}, p)
		})
	}
}

// TestNoInputEcho: errors show the position (file, line, column) and a
// short escaped excerpt, never a huge token or raw control characters.
func TestNoInputEcho(t *testing.T) {
	huge := "1" + strings.Repeat("9", 1<<20) + "\x1b[31m\x07x"
	ogb := func(file, content string) func(t *testing.T) error {
		return func(t *testing.T) error {
			dir := t.TempDir()
			files := map[string]string{"edge.csv": "0,1\n1,0\n", "node-feat.csv": "1,2\n3,4\n"}
			files[file] = content
			for k, v := range files {
				writeFile(t, dir, "raw/"+k, []byte(v))
			}
			_, err := LoadOGB(dir, Options{Quiet: true})
			return err
		}
	}
	for _, c := range []struct {
		name string
		load func(t *testing.T) error
		want string
	}{
		{"ogb feature", ogb("node-feat.csv", "1,2\n3,"+huge+"\n"), "node-feat.csv:2:3: field 2: bad number \"1999"},
		{"ogb edge", ogb("edge.csv", "0,1\n1,"+huge+"\n"), "edge.csv:2:3: field 2: want an integer node ID"},
		{"ogb label", ogb("node-label.csv", "0\n"+huge+"\n"), "node-label.csv:2:1: bad label"},
		{"ogb node count", ogb("num-node-list.csv", huge+"\n"), "num-node-list.csv:1:1: bad node count"},
		{"snap", func(t *testing.T) error {
			_, err := LoadSNAP(writeFile(t, t.TempDir(), "g.txt", []byte("0 1\n2 "+huge+"\n")), Options{Quiet: true})
			return err
		}, "g.txt:2:3: field 2"},
		{"shared meta.json", func(t *testing.T) error {
			dir := sharedFixture(t)
			p := filepath.Join(dir, "meta.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(b), `"num_nodes":4`, `"num_nodes":`+huge[:1<<19], 1)), 0o644)
			_, err := LoadShared(dir, Options{Quiet: true})
			return err
		}, "meta.json: at byte"},
		{"shared meta.json control character", func(t *testing.T) error {
			dir := sharedFixture(t)
			os.WriteFile(filepath.Join(dir, "meta.json"), []byte("{\"name\": \"a\x1b[31m"), 0o644)
			_, err := LoadShared(dir, Options{Quiet: true})
			return err
		}, "meta.json: at byte"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.load(t)
			wantErr(t, err, c.want)
			if msg := err.Error(); len(msg) > 300 || strings.ContainsAny(msg, "\x1b\x07\n") {
				t.Errorf("error of %d bytes echoes the input: %.300q", len(msg), msg)
			}
		})
	}
}

// TestDetectPathErrors: a path that cannot be examined is reported with
// its error (ELOOP, EACCES), not as an unknown layout.
func TestDetectPathErrors(t *testing.T) {
	t.Run("symlink loop", func(t *testing.T) {
		dir := t.TempDir()
		meta := filepath.Join(dir, "meta.json")
		if err := os.Symlink("b", meta); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("meta.json", filepath.Join(dir, "b")); err != nil {
			t.Fatal(err)
		}
		_, err := Detect(dir)
		if err == nil || !strings.Contains(err.Error(), meta) || !strings.Contains(err.Error(), "too many levels of symbolic links") {
			t.Fatalf("Detect: %v", err)
		}
	})
	t.Run("unreadable directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: permission bits do not stop root, so EACCES cannot be produced")
		}
		dir := sharedFixture(t)
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		_, err := Detect(dir)
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("Detect: %v", err)
		}
	})
}
