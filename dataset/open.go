package dataset

import (
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/regfile"
)

// OpenOptions controls Open. The zero value memory-maps the arrays and
// verifies every checksum.
type OpenOptions struct {
	// SkipChecksums skips CRC-32C verification (benchmarks re-opening
	// trusted data). Structural validation always runs.
	SkipChecksums bool
	// NoMmap reads the arrays into the Go heap instead of mapping them, so
	// the returned slices are writable.
	NoMmap bool
	// Quiet disables the progress bar (otherwise shown for >= 64 MiB).
	Quiet bool
	// OnPhase, when set, is told how long each step of Open took, as it
	// ends: "open" (the manifest, and mapping or reading the arrays),
	// "verify" (the block checksums; not called with SkipChecksums) and
	// "validate" (the structural checks). strata train reports them with
	// the rest of its setup.
	OnPhase func(phase string, d time.Duration)
}

// loaded is one array file brought into memory.
type loaded struct {
	meta   *ArrayMeta
	path   string
	data   []byte
	mapped bool
}

// Open reads the dataset directory dir. It checks the manifest (magic,
// version, self-checksum, counts), that every array file has exactly the
// declared size, every block checksum (unless opts.SkipChecksums), and the
// dataset's structure (see Validate). Errors about content are
// *FormatError wrapping ErrCorruption and name the file and byte offset.
//
// By default the arrays are read-only memory mappings (zero copy); call
// Close on the result to release them.
func Open(dir string, opts OpenOptions) (*Dataset, error) {
	phase := opts.phases()
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	arrs, err := openArrays(dir, m.Arrays, arrayOrder, opts, phase)
	if err != nil {
		return nil, err
	}
	defer arrs.unmapUnlessKept()
	d := &Dataset{
		Name: m.Name, Directed: m.Directed,
		FeatDim: int(m.FeatDim), NumClasses: int(m.NumClasses),
	}
	d.Graph = &graph.CSR{
		NumRows: m.NumNodes, NumCols: m.NumNodes,
		Indptr:  typed[int64](arrs.get(ArrIndptr)),
		Indices: typed[int32](arrs.get(ArrIndices)),
		Weights: typed[float32](arrs.get(ArrWeights)),
	}
	d.Features = typed[float32](arrs.get(ArrFeatures))
	d.Labels = typed[int32](arrs.get(ArrLabels))
	d.Train = typed[int32](arrs.get(ArrTrain))
	d.Val = typed[int32](arrs.get(ArrVal))
	d.Test = typed[int32](arrs.get(ArrTest))
	if err := validate(d, arrs.path); err != nil {
		return nil, err
	}
	phase("validate")
	var readOnly bool
	d.release, readOnly = arrs.keep()
	d.opened = openedFP{fp: m.Fingerprint(), id: d.identity(), readOnly: readOnly}
	return d, nil
}

// phases returns the function that tells OnPhase how long each step of
// an Open took, as it ends.
func (opts OpenOptions) phases() func(name string) {
	t0 := time.Now()
	return func(name string) {
		d := time.Since(t0)
		t0 = t0.Add(d)
		if opts.OnPhase != nil {
			opts.OnPhase(name, d)
		}
	}
}

// arraySet is a dataset's array files in memory (openArrays), for Open
// and OpenHetero alike.
type arraySet struct {
	dir    string
	byName map[string]*loaded
	kept   bool
}

// openArrays loads every array metas lists, checking each file's size
// before anything is mapped or allocated (phase "open"), and verifies
// their block checksums unless opts.SkipChecksums (phase "verify"), the
// arrays taken in the order of names so that the mismatch reported is the
// first in that order. The caller defers unmapUnlessKept and calls keep
// once the dataset built from the arrays is valid.
func openArrays(dir string, metas []ArrayMeta, names []string, opts OpenOptions, phase func(string)) (*arraySet, error) {
	s := &arraySet{dir: dir, byName: make(map[string]*loaded, len(metas))}
	var total int64
	for i := range metas {
		a := &metas[i]
		l, err := loadArray(s.path(a.Name), a, !opts.NoMmap)
		if err != nil {
			s.unmapUnlessKept()
			return nil, err
		}
		s.byName[a.Name] = l
		total += a.Bytes
	}
	phase("open")
	if opts.SkipChecksums {
		return s, nil
	}
	var bar *progress.Bar
	if !opts.Quiet && total >= progressMin {
		bar = progress.New(total, "verifying "+filepath.Base(dir))
	}
	ordered := make([]*loaded, 0, len(s.byName))
	for _, name := range names {
		if l := s.byName[name]; l != nil {
			ordered = append(ordered, l)
		}
	}
	err := verifyChecksums(ordered, bar)
	bar.Finish()
	if err != nil {
		s.unmapUnlessKept()
		return nil, err
	}
	phase("verify")
	return s, nil
}

// get returns the named array, nil when the dataset has none.
func (s *arraySet) get(name string) *loaded { return s.byName[name] }

// path is the file of the named array.
func (s *arraySet) path(name string) string { return filepath.Join(s.dir, ArrayFile(name)) }

// unmapUnlessKept releases the mappings of a dataset that failed to open.
func (s *arraySet) unmapUnlessKept() {
	if s.kept {
		return
	}
	for _, l := range s.byName {
		if l.mapped {
			munmap(l.data)
		}
	}
}

// keep hands the arrays to the opened dataset: release unmaps them (nil
// when nothing is mapped), and readOnly says whether every array is a
// read-only mapping (none was read or decoded into the heap).
func (s *arraySet) keep() (release func() error, readOnly bool) {
	s.kept = true
	var maps [][]byte
	readOnly = hostLE // elsewhere typed decoded the arrays into the heap
	for _, l := range s.byName {
		if l.mapped {
			maps = append(maps, l.data)
		} else if len(l.data) > 0 {
			readOnly = false
		}
	}
	if len(maps) == 0 {
		return nil, readOnly
	}
	return func() error {
		var first error
		for _, b := range maps {
			if err := munmap(b); err != nil && first == nil {
				first = fmt.Errorf("dataset: munmap: %w", err)
			}
		}
		return first
	}, readOnly
}

// typed turns a loaded array into a []T: a zero-copy view on
// little-endian hosts, a decoded copy otherwise. Absent arrays give nil.
func typed[T element](l *loaded) []T {
	if l == nil {
		return nil
	}
	if !hostLE {
		out := decodeLE[T](l.data)
		if l.mapped {
			munmap(l.data)
			l.mapped = false
		}
		l.data = nil
		return out
	}
	return fromBytes[T](l.data)
}

// loadArray checks the file size against the manifest before mapping or
// allocating anything, so a lying manifest cannot cause a huge allocation.
func loadArray(path string, a *ArrayMeta, useMmap bool) (*loaded, error) {
	f, fi, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	if size := fi.Size(); size != a.Bytes {
		if size < a.Bytes {
			return nil, formatErr(path, size, "file truncated: %d bytes, manifest declares %d", size, a.Bytes)
		}
		return nil, formatErr(path, a.Bytes, "file has %d bytes, manifest declares %d (trailing data)", size, a.Bytes)
	}
	if a.Bytes > math.MaxInt {
		return nil, formatErr(path, -1, "array of %d bytes does not fit in memory on this platform", a.Bytes)
	}
	l := &loaded{meta: a, path: path}
	if a.Bytes == 0 {
		l.data = []byte{}
		return l, nil
	}
	if useMmap && canMmap {
		if b, err := mmapFile(f, a.Bytes); err == nil {
			l.data, l.mapped = b, true
			return l, nil
		}
		// Fall through to a plain read (e.g. a filesystem without mmap).
	}
	// Allocate with the element type so the slice is aligned for it.
	var buf []byte
	switch a.DType.Size() {
	case 8:
		buf = asBytes(make([]int64, a.Bytes/8))
	default:
		buf = asBytes(make([]int32, a.Bytes/4))
	}
	if n, err := io.ReadFull(f, buf); err != nil {
		return nil, formatErr(path, int64(n), "reading: %v", err)
	}
	l.data = buf
	return l, nil
}

// verifyChecksums checks every block of every array, spreading blocks over
// GOMAXPROCS goroutines; the reported mismatch is the first one in file
// order, whatever the scheduling.
func verifyChecksums(arrs []*loaded, bar *progress.Bar) error {
	type job struct {
		arr   int
		block int
	}
	var jobs []job
	got := make([][]uint32, len(arrs))
	for i, l := range arrs {
		got[i] = make([]uint32, len(l.meta.CRC32C))
		for b := range l.meta.CRC32C {
			jobs = append(jobs, job{i, b})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= int64(len(jobs)) {
					return
				}
				j := jobs[k]
				l := arrs[j.arr]
				bs := l.meta.BlockBytes
				lo := int64(j.block) * bs
				hi := min(lo+bs, int64(len(l.data)))
				got[j.arr][j.block] = crc32.Checksum(l.data[lo:hi], castagnoli)
				bar.Add(hi - lo)
			}
		})
	}
	wg.Wait()
	for i, l := range arrs {
		for b, want := range l.meta.CRC32C {
			if c := crcHex(got[i][b]); c != want {
				lo := int64(b) * l.meta.BlockBytes
				hi := min(lo+l.meta.BlockBytes, l.meta.Bytes)
				return formatErr(l.path, lo, "checksum mismatch in block %d (bytes %d to %d): stored %s, computed %s", b, lo, hi, want, c)
			}
		}
	}
	return nil
}

// Summary describes a dataset directory without loading its arrays.
type Summary struct {
	Dir        string
	Name       string
	Version    int
	NumNodes   int64
	NumEdges   int64
	Directed   bool
	Weighted   bool
	FeatDim    int64
	NumClasses int64
	NumTrain   int64
	NumVal     int64
	NumTest    int64
	TotalBytes int64       // sum of the array files
	Arrays     []ArrayMeta // as listed in the manifest
}

// Info reads dir's manifest and checks that every array file exists with
// the declared size; it reads no array data and verifies no checksum (use
// Open for that).
func Info(dir string) (*Summary, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	s := &Summary{
		Dir: dir, Name: m.Name, Version: m.Version,
		NumNodes: m.NumNodes, NumEdges: m.NumEdges, Directed: m.Directed,
		FeatDim: m.FeatDim, NumClasses: m.NumClasses, Arrays: m.Arrays,
	}
	st, err := statArrays(dir, m.Arrays)
	if err != nil {
		return nil, err
	}
	s.TotalBytes, s.NumTrain, s.NumVal, s.NumTest = st.total, st.train, st.val, st.test
	s.Weighted = st.weighted
	return s, nil
}

// arrayStats is what the manifest says of the arrays statArrays checked.
type arrayStats struct {
	total, train, val, test int64
	weighted                bool
}

// statArrays checks that every array file of arrays exists in dir with
// the declared size, reading none, and sums them up (Info, HeteroInfo).
func statArrays(dir string, arrays []ArrayMeta) (arrayStats, error) {
	var st arrayStats
	for _, a := range arrays {
		path := filepath.Join(dir, ArrayFile(a.Name))
		fi, err := os.Stat(path)
		if err != nil {
			return st, fmt.Errorf("dataset: %w", err)
		}
		if fi.Size() != a.Bytes {
			return st, formatErr(path, min(fi.Size(), a.Bytes), "file has %d bytes, manifest declares %d", fi.Size(), a.Bytes)
		}
		st.total += a.Bytes
		switch a.Name {
		case ArrWeights:
			st.weighted = true
		case ArrTrain:
			st.train = a.Shape[0]
		case ArrVal:
			st.val = a.Shape[0]
		case ArrTest:
			st.test = a.Shape[0]
		}
	}
	return st, nil
}

// String formats the summary for humans (strata info).
func (s *Summary) String() string {
	var b strings.Builder
	dir := "directed"
	if !s.Directed {
		dir = "undirected (both directions stored)"
	}
	fmt.Fprintf(&b, "dataset     %s (%s, format v%d)\n", s.Name, s.Dir, s.Version)
	fmt.Fprintf(&b, "nodes       %d\n", s.NumNodes)
	fmt.Fprintf(&b, "edges       %d, %s", s.NumEdges, dir)
	if s.Weighted {
		b.WriteString(", weighted")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "features    %d\n", s.FeatDim)
	fmt.Fprintf(&b, "classes     %d\n", s.NumClasses)
	fmt.Fprintf(&b, "split       train %d / val %d / test %d\n", s.NumTrain, s.NumVal, s.NumTest)
	fmt.Fprintf(&b, "size        %d bytes\n", s.TotalBytes)
	for _, a := range s.Arrays {
		fmt.Fprintf(&b, "  %-9s %-7s %v %d bytes\n", a.Name, a.DType, a.Shape, a.Bytes)
	}
	return b.String()
}
