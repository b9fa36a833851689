package machines

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/npy"
)

// The hot rows of a machine directory (DSP's layout: every machine holds
// the topology and the hot features; only cold rows are partitioned
// across machines). `strata partition --machines` ranks every node by
// the hotness the cache plan uses (in-degree by default) on the
// renumbered graph and takes the HotRows hottest: the hot set, the same
// on every machine and named by the partition's fingerprint (its count,
// hotness and the SHA-256 of its IDs). Each directory holds the hot
// set's IDs (hot_ids.npy, hottest first) and the rows of those of them
// that another machine owns (hot_features.npy, in the same order; its
// own hot rows are in features.npy already), whose SHA-256 the manifest
// records. A machine reads its hot rows locally; the feature services
// answer only for their own shard, so what crosses the network is the
// cold rows of other machines.

// Names of the hot rows' files.
const (
	HotIDsFile      = "hot_ids.npy"
	HotFeaturesFile = "hot_features.npy"
)

// DefaultHotBytes is `strata partition --machines`' default budget of
// hot rows: one machine's share of the table (nodes/machines rows of
// cols float32 values), so that a directory holds at most about twice
// its share of the rows (its shard, and the hottest share of the
// others'). A sampled batch reads hot rows far more often than cold
// ones (that is what hotness ranks), so this share serves most of the
// rows a machine does not own. With one machine it is the whole table.
func DefaultHotBytes(nodes int64, cols, machines int) int64 {
	if machines < 1 || nodes < 0 || cols < 1 {
		return 0
	}
	return (nodes + int64(machines) - 1) / int64(machines) * int64(cols) * 4
}

// HotRowsOf is the number of hot rows a budget of bytes holds (-1: every
// row) for a table of nodes rows of cols float32 values.
func HotRowsOf(budget, nodes int64, cols int) int64 {
	if budget < 0 {
		return nodes
	}
	return min(nodes, budget/(4*int64(max(cols, 1))))
}

// hotOrder ranks the nodes of the in-adjacency in by hotness h (not
// presample: that needs a training configuration).
func hotOrder(in *graph.CSR, h cache.Hotness) ([]graph.NodeID, error) {
	switch h {
	case cache.ByInDegree:
		return cache.InDegree(in)
	case cache.ByPageRank:
		return cache.PageRank(in)
	case cache.ByReversePageRank:
		return cache.ReversePageRank(in)
	}
	return nil, fmt.Errorf("machines: hotness %q for the hot rows: want %s, %s or %s", h, cache.ByInDegree, cache.ByPageRank, cache.ByReversePageRank)
}

// hotHash is the SHA-256 of raw bytes, in hex.
func hotHash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// int32Bytes is ids as little-endian bytes (hot_ids.npy's data).
func int32Bytes(ids []int32) []byte {
	b := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// float32Bytes is x as little-endian bytes (hot_features.npy's data).
func float32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// Hot is a machine's hot rows of other machines: IDs (global, hottest
// first) and their rows, len(IDs) x Cols.
type Hot struct {
	IDs []int32
	X   []float32
}

// ParseHot checks the hot rows' files of the directory whose manifest is
// m (hot_ids.npy's and hot_features.npy's whole bytes; path for
// messages) against it and returns the rows of other machines. Every
// size is checked against the manifest before anything is sized from
// the files.
func ParseHot(path string, m *Manifest, ids, rows []byte) (*Hot, error) {
	ip, rp := filepath.Join(path, HotIDsFile), filepath.Join(path, HotFeaturesFile)
	if m.HotRows == 0 {
		return &Hot{}, nil
	}
	h, err := npy.ParseHeader(ids)
	if err != nil {
		return nil, dirErr(ip, err, "hot IDs")
	}
	if h.Descr != "<i4" || h.FortranOrder || len(h.Shape) != 1 || h.Shape[0] != m.HotRows {
		return nil, dirErr(ip, nil, "holds %s %v (fortran %v), want <i4 [%d] (the manifest's hot_rows)", h.Descr, h.Shape, h.FortranOrder, m.HotRows)
	}
	if int64(len(ids)) != h.DataOffset+4*m.HotRows {
		return nil, dirErr(ip, nil, "%d bytes, want %d (header %d + %d int32 IDs)", len(ids), h.DataOffset+4*m.HotRows, h.DataOffset, m.HotRows)
	}
	raw := ids[h.DataOffset:]
	if got := hotHash(raw); got != m.HotIDsSHA256 {
		return nil, dirErr(ip, ErrOtherPartition, "SHA-256 %s, but the manifest names hot IDs %s: damaged, or from another partition", got[:16], truncate(m.HotIDsSHA256))
	}
	all := make([]int32, m.HotRows)
	local := int64(0)
	for i := range all {
		v := int32(binary.LittleEndian.Uint32(raw[4*i:]))
		if v < 0 || int64(v) >= m.Nodes {
			return nil, dirErr(ip, nil, "hot ID %d (entry %d) not in [0, %d)", v, i, m.Nodes)
		}
		all[i] = v
		if int64(v) < m.Lo || int64(v) >= m.Hi {
			local++
		}
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, dirErr(ip, nil, "hot ID %d listed twice", sorted[i])
		}
	}
	if local != m.HotLocal {
		return nil, dirErr(ip, nil, "%d hot IDs outside the machine's rows [%d, %d), the manifest says %d", local, m.Lo, m.Hi, m.HotLocal)
	}
	h, err = npy.ParseHeader(rows)
	if err != nil {
		return nil, dirErr(rp, err, "hot rows")
	}
	c := int64(m.Cols)
	if h.Descr != "<f4" || h.FortranOrder || len(h.Shape) != 2 || h.Shape[0] != local || h.Shape[1] != c {
		return nil, dirErr(rp, nil, "holds %s %v (fortran %v), want <f4 [%d %d]", h.Descr, h.Shape, h.FortranOrder, local, c)
	}
	if int64(len(rows)) != h.DataOffset+4*local*c {
		return nil, dirErr(rp, nil, "%d bytes, want %d (header %d + %d rows x %d float32)", len(rows), h.DataOffset+4*local*c, h.DataOffset, local, c)
	}
	data := rows[h.DataOffset:]
	if got := hotHash(data); got != m.HotSHA256 {
		return nil, dirErr(rp, nil, "SHA-256 %s, the manifest says %s: the hot rows are damaged", got[:16], truncate(m.HotSHA256))
	}
	out := &Hot{IDs: make([]int32, 0, local), X: make([]float32, local*c)}
	for _, v := range all {
		if int64(v) < m.Lo || int64(v) >= m.Hi {
			out.IDs = append(out.IDs, v)
		}
	}
	for i := range out.X {
		out.X[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, nil
}

// readHot reads and checks the hot rows' files of the directory at path.
func readHot(path string, m *Manifest) (*Hot, error) {
	if m.HotRows == 0 {
		return &Hot{}, nil
	}
	ids, err := readSized(filepath.Join(path, HotIDsFile), 4*m.HotRows)
	if err != nil {
		return nil, err
	}
	rows, err := readSized(filepath.Join(path, HotFeaturesFile), 4*m.HotLocal*int64(m.Cols))
	if err != nil {
		return nil, err
	}
	return ParseHot(path, m, ids, rows)
}

// readSized reads a .npy file of data bytes after its header, refusing
// one larger than any header and data could be (before reading it).
func readSized(path string, data int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, dirErr(path, err, "hot rows (written by strata partition --machines with --hot-bytes)")
	}
	if fi.Size() > data+npy.MaxHeader+16 {
		return nil, dirErr(path, nil, "%d bytes, more than the %d its manifest gives room for", fi.Size(), data+npy.MaxHeader+16)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, dirErr(path, err, "reading")
	}
	return b, nil
}

// writeHot writes machine dir's hot files for the hot set ids (hottest
// first) of the renumbered table x (cols wide) and fills man's per-
// machine hot fields (the hot set's are filled by the caller).
func writeHot(dir string, man *Manifest, ids []int32, x []float32, cols int) error {
	if len(ids) == 0 {
		return nil
	}
	var local []float32
	n := int64(0)
	c := int64(cols)
	for _, v := range ids {
		if int64(v) < man.Lo || int64(v) >= man.Hi {
			local = append(local, x[int64(v)*c:(int64(v)+1)*c]...)
			n++
		}
	}
	man.HotLocal = n
	man.HotSHA256 = hotHash(float32Bytes(local))
	if err := npy.WriteInt32(filepath.Join(dir, HotIDsFile), ids); err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	if err := npy.WriteFloat32(filepath.Join(dir, HotFeaturesFile), int(n), cols, local); err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	return nil
}

// checkHotManifest checks the manifest's hot fields.
func checkHotManifest(path string, m *Manifest) error {
	if m.HotRows == 0 {
		if m.Hotness != "" || m.HotIDsSHA256 != "" || m.HotLocal != 0 || m.HotSHA256 != "" {
			return dirErr(path, nil, "hot fields without hot rows (hot_rows 0)")
		}
		return nil
	}
	switch {
	case m.HotRows < 0 || m.HotRows > m.Nodes:
		return dirErr(path, nil, "hot_rows %d, want 0..%d", m.HotRows, m.Nodes)
	case m.HotLocal < 0 || m.HotLocal > m.HotRows || m.HotLocal > m.Nodes-(m.Hi-m.Lo):
		return dirErr(path, nil, "hot_local_rows %d, want 0..%d (hot rows outside the machine's %d)", m.HotLocal, min(m.HotRows, m.Nodes-(m.Hi-m.Lo)), m.Hi-m.Lo)
	case !isHex64(m.HotIDsSHA256) || !isHex64(m.HotSHA256):
		return dirErr(path, nil, "hot SHA-256 %q / %q, want 64 hex digits each", truncate(m.HotIDsSHA256), truncate(m.HotSHA256))
	}
	switch cache.Hotness(m.Hotness) {
	case cache.ByInDegree, cache.ByPageRank, cache.ByReversePageRank:
		return nil
	}
	return dirErr(path, nil, "hotness %q, want %s, %s or %s", truncate(m.Hotness), cache.ByInDegree, cache.ByPageRank, cache.ByReversePageRank)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
