package dataset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-gnn/strata/graph"
)

// FuzzParseHeteroManifest feeds arbitrary bytes to the version 2
// manifest parser, and any JSON that decodes into a HeteroManifest
// re-signed with a correct checksum. Accepted manifests must be
// internally consistent: every relation's indptr sized by its
// destination type.
func FuzzParseHeteroManifest(f *testing.F) {
	dir := filepath.Join(f.TempDir(), "typed")
	if err := WriteHetero(dir, tinyHetero(), WriteOptions{Quiet: true, NoSync: true}); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"magic":"STRATA-DS","version":1}`))
	f.Add([]byte(`{"magic":"STRATA-DS","version":2,"node_types":[{"name":"a","num_nodes":-1,"feat_dim":0}],"checksum":"crc32c"}`))
	f.Add([]byte(`{"magic":"STRATA-DS","version":2,"node_types":[{"name":"a","num_nodes":2,"feat_dim":0}],"edge_types":[{"src":"a","rel":"r","dst":"a","num_edges":1}],"checksum":"crc32c","arrays":[{"name":"edge0.indptr","dtype":"int64","shape":[3],"bytes":24,"block_bytes":4096,"crc32c":["00000000"]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(m *HeteroManifest) {
			index := map[string]int64{}
			for _, nt := range m.NodeTypes {
				index[nt.Name] = nt.NumNodes
			}
			for r, et := range m.EdgeTypes {
				ip := m.Array(edgeArray(r, "indptr"))
				if ip == nil || ip.Shape[0] != index[et.Dst]+1 || ip.Bytes != 8*ip.Shape[0] {
					t.Fatalf("relation %d: indptr %+v for %d destinations", r, ip, index[et.Dst])
				}
			}
		}
		if m, err := ParseHeteroManifest("m", b); err == nil {
			if m.Magic != Magic || m.Version != FormatVersionHetero {
				t.Fatalf("accepted bad manifest %+v", m)
			}
			check(m)
		}
		var m HeteroManifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		m.ManifestCRC32C, _ = heteroManifestCRC(&m)
		re, err := json.Marshal(&m)
		if err != nil {
			return
		}
		if got, err := ParseHeteroManifest("m", re); err == nil {
			check(got)
		}
	})
}

// FuzzOpenHetero replaces one array file of a valid typed dataset with
// arbitrary bytes, adjusts the manifest to the new length where the
// dtype allows (optionally fixing the checksums so that structural
// validation is reached), and opens it with and without mmap. OpenHetero
// must never panic, and what it accepts must pass ValidateHetero.
func FuzzOpenHetero(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 0, 0, 0, 0, 0x80, 0x7f}, true)
	f.Add(uint8(2), []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, true)
	f.Add(uint8(3), []byte{1, 0, 0, 0, 9, 0, 0, 0}, true)
	f.Add(uint8(5), []byte{0, 0, 0xc0, 0x7f}, true)
	f.Add(uint8(8), []byte{3, 0, 0, 0, 1, 0, 0, 0}, false)
	f.Add(uint8(9), []byte{}, true)
	names := []string{"node0.features", "node1.features", "edge0.indptr", "edge0.indices", "edge1.indptr", "edge1.weights",
		"edge2.indptr", "edge2.indices", ArrLabels, ArrTrain, ArrVal, ArrTest}
	f.Fuzz(func(t *testing.T, sel uint8, data []byte, fix bool) {
		if len(data) > 1<<16 {
			return
		}
		dir := filepath.Join(t.TempDir(), "typed")
		if err := WriteHetero(dir, tinyHetero(), WriteOptions{Quiet: true, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		name := names[int(sel)%len(names)]
		if err := os.WriteFile(filepath.Join(dir, ArrayFile(name)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		rewriteHeteroManifest(t, dir, func(m *HeteroManifest) {
			a := m.Array(name)
			es := a.DType.Size()
			if int64(len(data))%es == 0 && len(a.Shape) == 1 {
				k := int64(len(data)) / es
				a.Shape[0], a.Bytes = k, int64(len(data))
				var r int
				switch {
				case name == "edge0.indices":
					m.EdgeTypes[0].NumEdges = k
				case name == "edge2.indices":
					m.EdgeTypes[2].NumEdges = k
				case name == "edge0.indptr" || name == "edge2.indptr":
					if name == "edge2.indptr" {
						r = 2
					}
					for t := range m.NodeTypes {
						if m.NodeTypes[t].Name == m.EdgeTypes[r].Dst {
							m.NodeTypes[t].NumNodes = k - 1
						}
					}
				}
			}
			if fix {
				a.CRC32C = nil
				for lo := int64(0); lo < int64(len(data)); lo += a.BlockBytes {
					a.CRC32C = append(a.CRC32C, crcHex(crc32c(data[lo:min(lo+a.BlockBytes, int64(len(data)))])))
				}
			}
		})
		for _, opts := range []OpenOptions{{Quiet: true}, {Quiet: true, NoMmap: true}} {
			got, err := OpenHetero(dir, opts)
			if err != nil {
				continue
			}
			if err := ValidateHetero(got); err != nil {
				t.Fatalf("OpenHetero accepted a dataset ValidateHetero rejects: %v", err)
			}
			got.Close()
		}
	})
}

// FuzzValidateHetero builds typed datasets from bytes: two node types
// and one relation between them. ValidateHetero must never panic, and
// what it accepts must be safe to index: every row in bounds, every source
// below the source type's count, and Erased must succeed.
func FuzzValidateHetero(f *testing.F) {
	f.Add([]byte{3, 2, 0, 1, 2, 3, 1, 0, 1}, uint8(2))
	f.Add([]byte{2, 1, 0, 2, 0, 0}, uint8(0))
	f.Add([]byte{1, 5, 0, 9}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, classes uint8) {
		if len(b) < 2 {
			return
		}
		nd, ns := int64(b[0]%16), int64(b[1]%16)
		b = b[2:]
		take := func(k int64) []byte {
			k = min(k, int64(len(b)))
			out := b[:k]
			b = b[k:]
			return out
		}
		ip := take(nd + 1)
		g := &graph.CSR{NumRows: nd, NumCols: ns, Indptr: make([]int64, len(ip))}
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
		h := &Hetero{
			NodeTypes:  []NodeType{{Name: "d", NumNodes: nd}, {Name: "s", NumNodes: ns}},
			EdgeTypes:  []EdgeType{{Src: 1, Dst: 0, Rel: "r", In: g}},
			NumClasses: int(classes % 4),
		}
		if h.NumClasses > 0 {
			for _, v := range take(nd) {
				h.Labels = append(h.Labels, int32(int8(v)))
			}
			for _, v := range take(3) {
				h.Train = append(h.Train, int32(int8(v)))
			}
		}
		if ValidateHetero(h) != nil {
			return
		}
		for v := int64(0); v < nd; v++ {
			for _, u := range g.Neighbors(int32(v)) {
				if u < 0 || int64(u) >= ns {
					t.Fatalf("accepted source %d with %d sources", u, ns)
				}
			}
		}
		if _, err := h.Erased(); err != nil {
			t.Fatalf("valid typed dataset, Erased: %v", err)
		}
	})
}
