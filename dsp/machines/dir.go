package machines

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/internal/npy"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/partition/book"
)

// Names inside a machine directory.
const (
	ManifestFile  = "machine.json"
	FeaturesFile  = "features.npy"
	PartitionFile = "partition.bin"
	DatasetDir    = "dataset"
	// Format is machine.json's format tag.
	Format = "strata-machine/1"
)

// MaxMachines bounds Manifest.Machines and MaxParts the parts (devices
// of the job).
const (
	MaxMachines = 1 << 10
	MaxParts    = 1 << 10
)

// ErrOtherPartition is wrapped by the error for a directory whose
// partition is not the job's.
var ErrOtherPartition = errors.New("machine directory from another partition")

// Manifest is machine.json.
type Manifest struct {
	Format            string `json:"format"`
	Machine           int    `json:"machine"`
	Machines          int    `json:"machines"`
	DevicesPerMachine int    `json:"devices_per_machine"`
	// Fingerprint names the partition: the same in every machine's
	// directory of one `strata partition --machines` run.
	Fingerprint string `json:"fingerprint"`
	// Dataset and DatasetFingerprint are the partitioned dataset's
	// (original IDs).
	Dataset            string  `json:"dataset"`
	DatasetFingerprint string  `json:"dataset_fingerprint"`
	Method             string  `json:"method"`
	Seed               uint64  `json:"seed"`
	Nodes              int64   `json:"nodes"`
	Cols               int     `json:"cols"`
	Book               []int64 `json:"book"` // one part per device of the job
	// Lo and Hi are the machine's rows (features.npy holds Hi-Lo rows).
	Lo int64 `json:"lo"`
	Hi int64 `json:"hi"`
	// NonNegative and MostlyZero describe the whole feature table (what
	// row normalization "auto" and the sparse-features note decide on).
	NonNegative bool `json:"non_negative"`
	MostlyZero  bool `json:"mostly_zero"`
	// The hot rows (hot.go): the HotRows hottest nodes by Hotness, the
	// same set on every machine (its IDs' SHA-256 HotIDsSHA256; all
	// three in the fingerprint), and this machine's rows of those that
	// other machines own: HotLocal rows whose bytes hash to HotSHA256.
	// All zero: none (every row of another machine is remote).
	Hotness      string `json:"hotness,omitempty"`
	HotRows      int64  `json:"hot_rows,omitempty"`
	HotIDsSHA256 string `json:"hot_ids_sha256,omitempty"`
	HotLocal     int64  `json:"hot_local_rows,omitempty"`
	HotSHA256    string `json:"hot_features_sha256,omitempty"`
}

// Error reports a bad machine directory: the file and what is wrong.
type Error struct {
	Path string
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("machines: %s: %s: %v", e.Path, e.Msg, e.Err)
	}
	return fmt.Sprintf("machines: %s: %s", e.Path, e.Msg)
}
func (e *Error) Unwrap() error { return e.Err }

func dirErr(path string, err error, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...), Err: err}
}

// fingerprint hashes what makes a partition: the dataset, the layout and
// the book.
func fingerprint(m *Manifest) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%s\x00%d\x00%d\x00%d\x00", m.Format, m.DatasetFingerprint, m.Machines, m.DevicesPerMachine, m.Method, m.Seed, m.Nodes, m.Cols)
	var b [8]byte
	for _, o := range m.Book {
		binary.LittleEndian.PutUint64(b[:], uint64(o))
		h.Write(b[:])
	}
	if m.HotRows != 0 {
		// Directories without hot rows keep the fingerprint they had.
		fmt.Fprintf(h, "hot\x00%s\x00%d\x00%s\x00", m.Hotness, m.HotRows, m.HotIDsSHA256)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ParseManifest decodes and checks machine.json (path for messages):
// every field is checked before anything is sized from it.
func ParseManifest(path string, b []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, dirErr(path, err, "malformed manifest")
	}
	if dec.More() {
		return nil, dirErr(path, nil, "trailing data after the manifest")
	}
	parts := m.Machines * m.DevicesPerMachine
	switch {
	case m.Format != Format:
		return nil, dirErr(path, nil, "format %q, want %q", m.Format, Format)
	case m.Machines < 1 || m.Machines > MaxMachines:
		return nil, dirErr(path, nil, "machines %d, want 1..%d", m.Machines, MaxMachines)
	case m.DevicesPerMachine < 1 || m.DevicesPerMachine > MaxParts || parts > MaxParts:
		return nil, dirErr(path, nil, "devices_per_machine %d (x %d machines), want 1..%d parts", m.DevicesPerMachine, m.Machines, MaxParts)
	case m.Machine < 0 || m.Machine >= m.Machines:
		return nil, dirErr(path, nil, "machine %d not in [0, %d)", m.Machine, m.Machines)
	case m.Nodes < 1 || m.Nodes > math.MaxInt32:
		return nil, dirErr(path, nil, "nodes %d, want 1..%d", m.Nodes, math.MaxInt32)
	case m.Cols < 1 || m.Cols > 1<<20:
		return nil, dirErr(path, nil, "cols %d, want 1..%d", m.Cols, 1<<20)
	case len(m.Book) != parts+1:
		return nil, dirErr(path, nil, "book of %d offsets, want %d (one part per device)", len(m.Book), parts+1)
	case len(m.Fingerprint) != 32:
		return nil, dirErr(path, nil, "fingerprint %q, want 32 hex digits", truncate(m.Fingerprint))
	}
	if m.Book[0] != 0 || m.Book[parts] != m.Nodes {
		return nil, dirErr(path, nil, "book runs from %d to %d, want 0 to %d", m.Book[0], m.Book[parts], m.Nodes)
	}
	for p := range parts {
		if m.Book[p+1] < m.Book[p] {
			return nil, dirErr(path, nil, "book offset %d (%d) below the one before (%d)", p+1, m.Book[p+1], m.Book[p])
		}
	}
	d := m.DevicesPerMachine
	if lo, hi := m.Book[m.Machine*d], m.Book[(m.Machine+1)*d]; m.Lo != lo || m.Hi != hi {
		return nil, dirErr(path, nil, "rows [%d, %d), but the book gives machine %d rows [%d, %d)", m.Lo, m.Hi, m.Machine, lo, hi)
	}
	if err := checkHotManifest(path, &m); err != nil {
		return nil, err
	}
	if fp := fingerprint(&m); fp != m.Fingerprint {
		return nil, dirErr(path, nil, "fingerprint %s does not match its content (%s): the manifest was edited or damaged", m.Fingerprint, fp)
	}
	return &m, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// MachineRange is the rows [lo, hi) machine m owns under book offsets
// off with d devices per machine.
func MachineRange(off []int64, d, m int) (lo, hi int64) { return off[m*d], off[(m+1)*d] }

// Dir is an opened machine directory.
type Dir struct {
	Path     string
	Manifest *Manifest
	// Dataset is the renumbered dataset without features (the topology,
	// labels and splits of every node).
	Dataset *dataset.Dataset
	Book    *book.Book
	// X is the machine's raw feature rows, (Hi-Lo) x Cols.
	X []float32
	// Hot is the machine's hot rows of other machines (raw; none when
	// the directory was written without hot rows).
	Hot *Hot
}

// Close releases the dataset's mappings.
func (d *Dir) Close() error { return d.Dataset.Close() }

// OwnerMachine is the machine owning node v.
func (d *Dir) OwnerMachine(v int64) int {
	return d.Book.Owner(v) / d.Manifest.DevicesPerMachine
}

// Open loads the machine directory at path: its manifest, dataset, book
// and feature shard, each checked against the manifest.
func Open(path string) (*Dir, error) {
	mp := filepath.Join(path, ManifestFile)
	b, err := os.ReadFile(mp)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, dirErr(path, err, "not a machine directory (no %s; write one with strata partition --machines)", ManifestFile)
		}
		return nil, dirErr(mp, err, "reading")
	}
	m, err := ParseManifest(mp, b)
	if err != nil {
		return nil, err
	}
	pp := filepath.Join(path, PartitionFile)
	saved, err := partition.ReadFile(pp)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(saved.Book.Offsets(), m.Book) {
		return nil, dirErr(pp, ErrOtherPartition, "its book differs from %s's", ManifestFile)
	}
	ds, err := dataset.Open(filepath.Join(path, DatasetDir), dataset.OpenOptions{Quiet: true})
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: path, Manifest: m, Dataset: ds, Book: saved.Book}
	if ds.NumNodes() != m.Nodes || ds.Features != nil {
		ds.Close()
		return nil, dirErr(filepath.Join(path, DatasetDir), nil, "%d nodes (features: %v), want %d nodes and no features", ds.NumNodes(), ds.Features != nil, m.Nodes)
	}
	if d.X, err = readRows(filepath.Join(path, FeaturesFile), m.Hi-m.Lo, m.Cols); err != nil {
		ds.Close()
		return nil, err
	}
	if d.Hot, err = readHot(path, m); err != nil {
		ds.Close()
		return nil, err
	}
	return d, nil
}

// readRows reads a float32 .npy of rows x cols.
func readRows(path string, rows int64, cols int) ([]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, dirErr(path, err, "opening")
	}
	defer f.Close()
	head := make([]byte, npy.MaxHeader+16)
	n, _ := f.ReadAt(head, 0)
	h, err := npy.ParseHeader(head[:n])
	if err != nil {
		return nil, dirErr(path, err, "feature shard")
	}
	if h.Descr != "<f4" || h.FortranOrder || len(h.Shape) != 2 || h.Shape[0] != rows || h.Shape[1] != int64(cols) {
		return nil, dirErr(path, nil, "holds %s %v (fortran %v), want <f4 [%d %d]", h.Descr, h.Shape, h.FortranOrder, rows, cols)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, dirErr(path, err, "stat")
	}
	want := h.DataOffset + 4*rows*int64(cols)
	if fi.Size() != want {
		return nil, dirErr(path, nil, "%d bytes, want %d (header %d + %d rows x %d float32)", fi.Size(), want, h.DataOffset, rows, cols)
	}
	raw := make([]byte, 4*rows*int64(cols))
	if _, err := f.ReadAt(raw, h.DataOffset); err != nil {
		return nil, dirErr(path, err, "reading the rows")
	}
	x := make([]float32, rows*int64(cols))
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return x, nil
}

// CheckJob checks that this directory is the one for machine `machine`
// of a job with `machines` machines and `devices` ranks in all, each
// machine owning devices/machines consecutive ranks.
func (d *Dir) CheckJob(machine, machines int, ranksPerMachine []int) error {
	m := d.Manifest
	if machines != m.Machines {
		return dirErr(d.Path, nil, "written for %d machines, the job runs on %d", m.Machines, machines)
	}
	if machine != m.Machine {
		return dirErr(d.Path, nil, "is machine %d's directory, but this process is on machine %d of the job", m.Machine, machine)
	}
	for i, n := range ranksPerMachine {
		if n != m.DevicesPerMachine {
			return dirErr(d.Path, nil, "written for %d devices per machine, machine %d of the job has %d", m.DevicesPerMachine, i, n)
		}
	}
	return nil
}

// describe is a one-line summary for logs.
func (m *Manifest) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine %d of %d (partition %s, rows [%d, %d) of %d", m.Machine, m.Machines, m.Fingerprint[:12], m.Lo, m.Hi, m.Nodes)
	if m.HotRows > 0 {
		fmt.Fprintf(&b, ", %d hot rows of other machines", m.HotLocal)
	}
	b.WriteString(")")
	return b.String()
}

// String describes the directory.
func (d *Dir) String() string { return d.Manifest.describe() }
