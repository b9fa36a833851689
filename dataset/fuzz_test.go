package dataset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// FuzzParseManifest feeds arbitrary bytes to the manifest parser, and
// (to get past the self-checksum) any JSON that decodes into a Manifest
// re-encoded with a correct checksum.
func FuzzParseManifest(f *testing.F) {
	dir := f.TempDir()
	if err := Write(filepath.Join(dir, "ds"), tiny(), WriteOptions{Quiet: true, NoSync: true}); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "ds", ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"magic":"STRATA-DS","version":2}`))
	f.Add([]byte(`{"magic":"STRATA-DS","version":1,"num_nodes":-1,"checksum":"crc32c","arrays":[{"name":"indptr","dtype":"int64","shape":[0],"bytes":0,"block_bytes":4096,"crc32c":[]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := ParseManifest("m", b); err == nil {
			if m.Magic != Magic || m.Version != FormatVersion || m.Array(ArrIndptr) == nil {
				t.Fatalf("accepted bad manifest %+v", m)
			}
		}
		var m Manifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		m.ManifestCRC32C, _ = manifestCRC(&m)
		re, err := json.Marshal(&m)
		if err != nil {
			return
		}
		if got, err := ParseManifest("m", re); err == nil {
			// Accepted manifests are internally consistent.
			ip := got.Array(ArrIndptr)
			if ip.Shape[0] != got.NumNodes+1 || ip.Bytes != 8*(got.NumNodes+1) {
				t.Fatalf("inconsistent indptr %+v for %d nodes", ip, got.NumNodes)
			}
		}
	})
}

// FuzzOpenArray replaces one array file of a valid dataset with arbitrary
// bytes, adjusts the manifest to the new length where the dtype allows
// (optionally fixing the checksums so structural validation is reached),
// and opens it with and without mmap. Open must never panic, and anything
// it accepts must pass Validate.
func FuzzOpenArray(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 0, 0, 0, 0, 0, 0}, true)
	f.Add(uint8(1), []byte{1, 0, 0, 0, 9, 0, 0, 0}, true)
	f.Add(uint8(2), []byte{0, 0, 0xc0, 0x7f}, true)
	f.Add(uint8(3), []byte{0, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 7, 0, 0, 0}, false)
	f.Add(uint8(4), []byte{3, 0, 0, 0, 1, 0, 0, 0}, true)
	f.Add(uint8(5), []byte{}, true)
	names := []string{ArrIndptr, ArrIndices, ArrFeatures, ArrLabels, ArrTrain, ArrVal, ArrTest}
	f.Fuzz(func(t *testing.T, sel uint8, data []byte, fix bool) {
		if len(data) > 1<<16 {
			return
		}
		dir := filepath.Join(t.TempDir(), "ds")
		d := tiny()
		d.Graph.Weights = nil
		if err := Write(dir, d, WriteOptions{Quiet: true, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		name := names[int(sel)%len(names)]
		if err := os.WriteFile(filepath.Join(dir, ArrayFile(name)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		rewriteManifest(t, dir, func(m *Manifest) {
			a := m.Array(name)
			es := a.DType.Size()
			if int64(len(data))%es == 0 {
				k := int64(len(data)) / es
				switch name {
				case ArrIndptr:
					m.NumNodes = k - 1
				case ArrIndices:
					m.NumEdges = k
				case ArrTrain, ArrVal, ArrTest:
				default:
					k = a.Shape[0]
				}
				a.Shape[0] = k
				a.Bytes = int64(len(data))
			}
			if fix {
				a.CRC32C = nil
				for lo := int64(0); lo < int64(len(data)); lo += a.BlockBytes {
					a.CRC32C = append(a.CRC32C, crcHex(crc32c(data[lo:min(lo+a.BlockBytes, int64(len(data)))])))
				}
			}
		})
		for _, opts := range []OpenOptions{{Quiet: true}, {Quiet: true, NoMmap: true}} {
			got, err := Open(dir, opts)
			if err != nil {
				continue
			}
			if err := Validate(got); err != nil {
				t.Fatalf("Open accepted a dataset Validate rejects: %v", err)
			}
			got.Close()
		}
	})
}

// FuzzValidate builds arbitrary in-memory datasets from bytes. Validate
// must never panic, and whatever it accepts must be safe to index: every
// row slice in bounds, every ID < N, and InAdjacency must succeed.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{3, 0, 2, 3, 3, 1, 2, 0}, false, uint8(2))
	f.Add([]byte{2, 0, 1, 2, 1, 0}, true, uint8(0))
	f.Add([]byte{1, 5, 0}, false, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, directed bool, classes uint8) {
		if len(b) == 0 {
			return
		}
		n := int64(b[0] % 16)
		b = b[1:]
		take := func(k int64) []byte {
			k = min(k, int64(len(b)))
			out := b[:k]
			b = b[k:]
			return out
		}
		ip := take(n + 1)
		g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, len(ip))}
		for i, v := range ip {
			g.Indptr[i] = int64(int8(v))
		}
		var e int64
		if len(g.Indptr) > 0 {
			e = max(0, g.Indptr[len(g.Indptr)-1])
		}
		for _, v := range take(e) {
			g.Indices = append(g.Indices, int32(int8(v)))
		}
		d := &Dataset{Graph: g, Directed: directed, NumClasses: int(classes % 4)}
		if d.NumClasses > 0 {
			for _, v := range take(n) {
				d.Labels = append(d.Labels, int32(int8(v)))
			}
			for _, v := range take(3) {
				d.Train = append(d.Train, int32(int8(v)))
			}
		}
		if Validate(d) != nil {
			return
		}
		for v := int64(0); v < n; v++ {
			for _, u := range g.Neighbors(int32(v)) {
				if u < 0 || int64(u) >= n {
					t.Fatalf("accepted ID %d with n=%d", u, n)
				}
			}
		}
		if _, err := d.InAdjacency(); err != nil {
			t.Fatalf("valid dataset, InAdjacency: %v", err)
		}
	})
}
