package machines_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/dsp/machines"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/internal/npy"
)

// writeCoraHot writes Cora's directories for 2 machines x 1 device with
// the hot rows of hotBytes.
func writeCoraHot(t *testing.T, seed uint64, hotBytes int64) (string, *machines.Partitioned) {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Partition(context.Background(), ds, 2, engine.Multilevel, seed)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "parts")
	if _, err := machines.Write(out, p, machines.WriteOptions{Machines: 2, DevicesPerMachine: 1, NoSync: true, HotBytes: hotBytes}); err != nil {
		t.Fatal(err)
	}
	return out, p
}

// TestHotRowsInEveryDirectory: every directory lists the same hot set,
// the hottest nodes by in-degree up to the budget, and holds the rows
// of those another machine owns, equal to the table's.
func TestHotRowsInEveryDirectory(t *testing.T) {
	const hotRows = 700
	out, p := writeCoraHot(t, 3, hotRows*1433*4+100)
	order, err := cache.InDegree(p.Dataset.InGraph())
	if err != nil {
		t.Fatal(err)
	}
	c := p.Dataset.FeatDim
	total := 0
	for m := range 2 {
		d, err := machines.Open(machines.MachineDir(out, m))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		mf := d.Manifest
		if mf.HotRows != hotRows || mf.Hotness != "in-degree" {
			t.Fatalf("machine %d: %d hot rows by %q, want %d by in-degree", m, mf.HotRows, mf.Hotness, hotRows)
		}
		var want []int32
		for _, v := range order[:hotRows] {
			if int64(v) < mf.Lo || int64(v) >= mf.Hi {
				want = append(want, int32(v))
			}
		}
		if !slices.Equal(d.Hot.IDs, want) || len(want) == 0 || len(want) == hotRows || int64(len(want)) != mf.HotLocal {
			t.Fatalf("machine %d: hot IDs of other machines %d, want %d (of %d)", m, len(d.Hot.IDs), len(want), hotRows)
		}
		for i, v := range d.Hot.IDs {
			for j := range c {
				if got, w := d.Hot.X[i*c+j], p.Dataset.Features[int(v)*c+j]; got != w {
					t.Fatalf("machine %d hot row %d (node %d) col %d: %v, want %v", m, i, v, j, got, w)
				}
			}
		}
		total += len(want)
	}
	if total != hotRows { // each hot row is owned by exactly one of the two
		t.Fatalf("%d hot rows of other machines over both, want %d", total, hotRows)
	}
	// Without hot rows the fingerprint is the one directories had before
	// hot rows existed; with them it differs.
	plain, _ := writeCoraHot(t, 3, 0)
	a, _ := os.ReadFile(filepath.Join(machines.MachineDir(plain, 0), machines.ManifestFile))
	b, _ := os.ReadFile(filepath.Join(machines.MachineDir(out, 0), machines.ManifestFile))
	ma, err1 := machines.ParseManifest("a", a)
	mb, err2 := machines.ParseManifest("b", b)
	if err := errors.Join(err1, err2); err != nil || ma.Fingerprint == mb.Fingerprint || ma.HotRows != 0 {
		t.Fatalf("fingerprints %s (no hot rows: %d) and %s: %v", ma.Fingerprint, ma.HotRows, mb.Fingerprint, err)
	}
	if _, err := os.Stat(filepath.Join(machines.MachineDir(plain, 0), machines.HotIDsFile)); !os.IsNotExist(err) {
		t.Fatalf("hot IDs without hot rows: %v", err)
	}
}

// TestHotRowsNeverFetched: with hot rows, a batch's hot rows of other
// machines come from the directory (HotHits), never from the network:
// the rows asked are exactly its cold rows of other machines; the values
// are the table's either way.
func TestHotRowsNeverFetched(t *testing.T) {
	out, p := writeCoraHot(t, 3, 900*1433*4)
	svcs := startServices(t, out, machines.ServiceOptions{MaxRows: 50})
	x, c := p.Dataset.Features, p.Dataset.FeatDim
	n := int32(p.Dataset.NumNodes())
	var ids []int32
	for v := range n {
		ids = append(ids, v, (v*97)%n)
	}
	d, err := machines.Open(machines.MachineDir(out, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hot := map[int32]bool{}
	for _, v := range d.Hot.IDs {
		hot[v] = true
	}
	lo, hi := int32(d.Manifest.Lo), int32(d.Manifest.Hi)
	cold, hotPos := map[int32]bool{}, 0
	for _, v := range ids {
		switch {
		case v >= lo && v < hi:
		case hot[v]:
			hotPos++
		default:
			cold[v] = true
		}
	}
	var ctr metrics.Counters
	got := make([]float32, len(ids)*c)
	if err := svcs[0].Gather(ids, got, &ctr); err != nil {
		t.Fatal(err)
	}
	for i, v := range ids {
		for j := range c {
			if got[i*c+j] != x[int(v)*c+j] {
				t.Fatalf("row %d (node %d) col %d: %v, want %v", i, v, j, got[i*c+j], x[int(v)*c+j])
			}
		}
	}
	f := svcs[0].Fetches()
	if f.Rows != int64(len(cold)) || svcs[0].HotHits() != int64(hotPos) || hotPos == 0 || len(cold) == 0 {
		t.Fatalf("fetched %d rows, %d hot hits; want the %d cold rows fetched and %d hot hits", f.Rows, svcs[0].HotHits(), len(cold), hotPos)
	}
	if b := ctr.Bytes(metrics.Feature, metrics.Network); b != int64(len(cold))*(4+4*int64(c)) {
		t.Fatalf("%d network bytes, want %d", b, int64(len(cold))*(4+4*int64(c)))
	}
	// The whole table (an evaluator's) asks only the cold rows too.
	all, err := svcs[0].All()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all, x) {
		t.Fatal("All differs from the table")
	}
	allCold := int64(n) - int64(hi-lo) - int64(len(d.Hot.IDs))
	if f2 := svcs[0].Fetches(); f2.Rows-f.Rows != allCold {
		t.Fatalf("All fetched %d rows, want the %d cold rows of machine 1", f2.Rows-f.Rows, allCold)
	}
}

// TestFetchSplitsAndPrefetch: an ask of many rows goes in InFlight
// requests at once (each at least MinRequestBytes); a prefetched batch
// is gathered from its prefetch, another is fetched.
func TestFetchSplitsAndPrefetch(t *testing.T) {
	out, p := writeCora(t)
	svcs := startServices(t, out, machines.ServiceOptions{})
	x, c := p.Dataset.Features, p.Dataset.FeatDim
	lo := int32(p.Book.Offsets()[1])
	n := int32(p.Dataset.NumNodes())
	var ids []int32
	for v := lo; v < lo+1000 && v < n; v++ {
		ids = append(ids, v)
	}
	var ctr metrics.Counters
	src := svcs[0].Source(&ctr)
	src.Prefetch(ids)
	got := make([]float32, len(ids)*c)
	if err := src.Gather(ids, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, x[int(lo)*c:int(lo+int32(len(ids)))*c]) {
		t.Fatal("prefetched rows differ from the table")
	}
	per := max((len(ids)+machines.DefaultInFlight-1)/machines.DefaultInFlight, (machines.MinRequestBytes+4*c+3)/(4*c+4))
	f := svcs[0].Fetches()
	if src.Prefetched() != 1 || f.Rows != int64(len(ids)) || f.Requests != int64((len(ids)+per-1)/per) || f.Requests < 2 {
		t.Fatalf("%d prefetched gathers, %d rows in %d requests; want 1, %d rows in %d", src.Prefetched(), f.Rows, f.Requests, len(ids), (len(ids)+per-1)/per)
	}
	// Another batch (not prefetched) is fetched when asked.
	if err := src.Gather(ids[:10], got[:10*c]); err != nil {
		t.Fatal(err)
	}
	if src.Prefetched() != 1 || svcs[0].Fetches().Rows != f.Rows+10 || ctr.Bytes(metrics.Feature, metrics.Network) != (f.Rows+10)*(4+4*int64(c)) {
		t.Fatalf("unprefetched gather: %d prefetched, %d rows", src.Prefetched(), svcs[0].Fetches().Rows)
	}
	// Past MaxAhead pending prefetches a new one is not started: the
	// oldest (the loader's next batches) are kept.
	for i := range machines.MaxAhead + 1 {
		src.Prefetch(ids[i : i+1])
	}
	for _, i := range []int{0, machines.MaxAhead} {
		if err := src.Gather(ids[i:i+1], got[:c]); err != nil || !slices.Equal(got[:c], x[int(ids[i])*c:int(ids[i]+1)*c]) {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if src.Prefetched() != 2 {
		t.Fatalf("%d gathers from prefetches, want 2 (the first of the %d, not the last)", src.Prefetched(), machines.MaxAhead+1)
	}
}

// TestHotFilesDamaged: a damaged, truncated, missing or foreign hot file
// is refused naming the file, never loaded.
func TestHotFilesDamaged(t *testing.T) {
	out, _ := writeCoraHot(t, 3, 500*1433*4)
	other, _ := writeCoraHot(t, 4, 500*1433*4)
	fewer, _ := writeCoraHot(t, 3, 400*1433*4)
	dir := machines.MachineDir(out, 1)
	ids, feats := filepath.Join(dir, machines.HotIDsFile), filepath.Join(dir, machines.HotFeaturesFile)
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	origIDs, origFeats := read(ids), read(feats)
	cases := []struct {
		name, file string
		edit       func() []byte // nil: remove the file
		want       string
		other      bool
	}{
		{"flipped row byte", feats, func() []byte { b := slices.Clone(origFeats); b[len(b)-3] ^= 1; return b }, "the hot rows are damaged", false},
		{"truncated rows", feats, func() []byte { return origFeats[:len(origFeats)-4] }, "bytes, want", false},
		{"missing rows", feats, nil, machines.HotFeaturesFile, false},
		{"truncated IDs", ids, func() []byte { return origIDs[:len(origIDs)-4] }, "bytes, want", false},
		{"flipped ID", ids, func() []byte { b := slices.Clone(origIDs); b[len(b)-4] ^= 1; return b }, "from another partition", true},
		{"IDs of another partition", ids, func() []byte { return read(filepath.Join(machines.MachineDir(other, 1), machines.HotIDsFile)) }, "from another partition", true},
		{"IDs of a smaller budget", ids, func() []byte { return read(filepath.Join(machines.MachineDir(fewer, 1), machines.HotIDsFile)) }, "want <i4 [500]", false},
		{"rows of a smaller budget", feats, func() []byte { return read(filepath.Join(machines.MachineDir(fewer, 1), machines.HotFeaturesFile)) }, "want <f4", false},
		{"oversize rows", feats, func() []byte { return append(slices.Clone(origFeats), make([]byte, 1<<17)...) }, "more than the", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				os.WriteFile(ids, origIDs, 0o644)
				os.WriteFile(feats, origFeats, 0o644)
			}()
			if tc.edit == nil {
				os.Remove(tc.file)
			} else if err := os.WriteFile(tc.file, tc.edit(), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := machines.Open(dir)
			if err == nil {
				d.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) || errors.Is(err, machines.ErrOtherPartition) != tc.other {
				t.Fatalf("error %q, want %q naming %s (another partition: %v)", err, tc.want, dir, tc.other)
			}
		})
	}
	// Restored, it opens again.
	d, err := machines.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	// A manifest whose hot count was edited fails its fingerprint.
	mp := filepath.Join(dir, machines.ManifestFile)
	b := read(mp)
	os.WriteFile(mp, []byte(strings.Replace(string(b), `"hot_rows": 500`, `"hot_rows": 499`, 1)), 0o644)
	if _, err := machines.Open(dir); err == nil || !strings.Contains(err.Error(), "does not match its content") {
		t.Fatalf("edited hot_rows: %v", err)
	}
}

// hotFiles builds a valid pair of hot files for m (IDs ids, rows x).
func hotFiles(t testing.TB, m *machines.Manifest, ids []int32, x []float32) (idb, rowb []byte) {
	dir := t.TempDir()
	if err := npy.WriteInt32(filepath.Join(dir, "i.npy"), ids); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFloat32(filepath.Join(dir, "x.npy"), len(x)/m.Cols, m.Cols, x); err != nil {
		t.Fatal(err)
	}
	idb, _ = os.ReadFile(filepath.Join(dir, "i.npy"))
	rowb, _ = os.ReadFile(filepath.Join(dir, "x.npy"))
	return idb, rowb
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// FuzzParseHot: any bytes for the two hot files give the hot rows or an
// error, never a panic; what is accepted lies outside the machine's rows
// and is as many rows as the manifest says.
func FuzzParseHot(f *testing.F) {
	m := &machines.Manifest{Nodes: 6, Cols: 2, Lo: 0, Hi: 3, HotRows: 3, HotLocal: 2, Hotness: "in-degree"}
	ids := []int32{5, 1, 4}
	x := []float32{1, 2, 3, float32(math.Inf(1))}
	idb, rowb := hotFiles(f, m, ids, x)
	raw := make([]byte, 12)
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	m.HotIDsSHA256 = sum(raw)
	m.HotSHA256 = sum(rowb[len(rowb)-16:])
	if h, err := machines.ParseHot("dir", m, idb, rowb); err != nil || !slices.Equal(h.IDs, []int32{5, 4}) {
		f.Fatalf("valid seed: %v", err)
	}
	f.Add(idb, rowb)
	f.Add(idb[:len(idb)-1], rowb)
	f.Add(rowb, idb)
	f.Add([]byte{}, []byte("\x93NUMPY"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		h, err := machines.ParseHot("dir", m, a, b)
		if err != nil {
			return
		}
		if int64(len(h.IDs)) != m.HotLocal || len(h.X) != len(h.IDs)*m.Cols {
			t.Fatalf("accepted %d IDs and %d values", len(h.IDs), len(h.X))
		}
		for _, v := range h.IDs {
			if int64(v) >= m.Lo && int64(v) < m.Hi || v < 0 || int64(v) >= m.Nodes {
				t.Fatalf("accepted hot ID %d", v)
			}
		}
	})
}
