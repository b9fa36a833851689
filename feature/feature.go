package feature

import (
	_ "embed"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

//go:embed gather.cu
var kernelSrc string

// Options configure a Store.
type Options struct {
	// BudgetBytes is the device memory the store may use: the slot table
	// (4 bytes per node) plus as many hot rows as fit. 0 keeps every row
	// in host memory.
	BudgetBytes int64
	// Hot lists nodes hottest first (nil: node order). Nodes not listed
	// are never hot.
	Hot []graph.NodeID
	// BFloat16 keeps the table (host and hot rows) as bfloat16, rounded
	// to nearest even (backend.BF16Bits): half the memory and half the
	// bytes a gather reads; Gather widens the rows to float32 exactly.
	BFloat16 bool
	// OnUpload, when set, is told of every chunk of hot rows copied to
	// the device (its bytes, 2 a value with BFloat16; the rows go in
	// chunks of at most 256 MiB): an upload of tens of GB shows its
	// progress.
	OnUpload func(bytes int64)
	// Offset, for a machine's shard (package dsp/machines): the table's
	// rows are nodes Offset .. Offset+rows-1, and gathers take those
	// global IDs (Hot lists shard rows, 0 .. rows-1).
	Offset int64
	// Extra, for a machine's shard: rows ExtraRows of Extra (cols wide:
	// rows of other machines the machine holds, its hot rows) kept in
	// device memory after the hot rows, whatever the budget (the caller
	// chose them within it), and read by GatherStaged's positions <= -2
	// (-2 - j: extra row j). They are never read from host memory.
	Extra     []float32
	ExtraRows []int32
	// NoHost keeps no table in host memory: the caller asks only for
	// hot and extra rows (DSP's partitioned cache when the devices
	// together cache every row: the others come from peers). A gather of
	// any other row zeroes it and reports an index error. Without it, a
	// store that does not cache every row pins a copy of the whole table
	// (57 GB at the papers shape, on every GPU).
	NoHost bool
}

// uploadChunk is the most bytes of hot rows one Upload copies (each
// chunk is reported to Options.OnUpload). A variable for the tests.
var uploadChunk = 256 << 20

// Store gathers feature rows on one GPU. It is safe for concurrent use.
type Store struct {
	dev        backend.Backend
	queue      backend.Enqueuer
	rows, cols int
	host       backend.HostBuffer // whole table, mapped
	hot        backend.Buffer     // hotRows x cols
	slot       backend.Buffer     // int32 per node: hot row or -1 (nil when nothing is hot)
	hotRows    int
	extra      int   // Options.ExtraRows' rows, after the hot rows in hot
	vbytes     int64 // bytes a value: 4, or 2 for bfloat16
	lo         int64 // Options.Offset
	gather     backend.Kernel
	gather4    backend.Kernel
	// Into a bfloat16 dst (a bfloat16 table only): scalar and 8 a
	// thread.
	gatherH  backend.Kernel
	gatherH8 backend.Kernel
}

// device is what a Store needs of its back end: kernels compiled at run
// time, a queue to launch them on and mapped pinned memory for the table.
type device interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
}

// HotByInDegree orders nodes by decreasing in-degree (row length of the
// in-adjacency in), ties by node id.
func HotByInDegree(in *graph.CSR) []graph.NodeID {
	n := int(in.NumRows)
	order := make([]graph.NodeID, n)
	for i := range order {
		order[i] = graph.NodeID(i)
	}
	slices.SortStableFunc(order, func(a, b graph.NodeID) int {
		da, db := in.Indptr[a+1]-in.Indptr[a], in.Indptr[b+1]-in.Indptr[b]
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	return order
}

// New copies the rows x cols table feats (row-major) into mapped pinned
// host memory and the hottest rows, within opt.BudgetBytes, into device
// memory. dev must compile and launch kernels and map pinned memory
// (backend.Kernels, Enqueuer and PinnedMemory: the CUDA back end).
//
// When the budget holds every row, nothing is read from host memory:
// the table goes to the device as it is (cache row v is node v, whatever
// opt.Hot's order, which is still checked) and no pinned copy is made,
// which at papers100M's size (57 GB) saves a pinned allocation, a copy
// and a reordered copy per GPU; with BFloat16 it is encoded chunk by
// chunk on its way. Otherwise the pinned copy (bfloat16 with BFloat16)
// and the gathering of the hot rows run in parallel chunks.
func New(b backend.Backend, feats []float32, rows, cols int, opt Options) (*Store, error) {
	if b == nil {
		return nil, fmt.Errorf("feature: nil device")
	}
	dev, ok := b.(device)
	if !ok {
		return nil, fmt.Errorf("feature: %s cannot gather on the device: it lacks run-time kernels, a queue or mapped pinned memory (backend.Kernels, Enqueuer, PinnedMemory)", b.Name())
	}
	if rows < 0 || cols <= 0 || rows >= 1<<31 || len(feats) != rows*cols {
		return nil, fmt.Errorf("feature: table of %d values is not %d rows x %d cols (rows < 2^31, cols > 0)", len(feats), rows, cols)
	}
	if opt.BudgetBytes < 0 {
		return nil, fmt.Errorf("feature: negative budget %d", opt.BudgetBytes)
	}
	if opt.Offset < 0 || opt.Offset+int64(rows) > 1<<31 {
		return nil, fmt.Errorf("feature: offset %d for %d rows (node IDs are int32)", opt.Offset, rows)
	}
	if len(opt.Extra)%cols != 0 || len(opt.ExtraRows) >= 1<<31 {
		return nil, fmt.Errorf("feature: %d extra values for %d rows of %d cols", len(opt.Extra), len(opt.ExtraRows), cols)
	}
	for i, r := range opt.ExtraRows {
		if r < 0 || int(r) >= len(opt.Extra)/cols {
			return nil, &backend.IndexError{Op: "feature.New", Name: "ExtraRows", Pos: i, Value: int64(r), Limit: len(opt.Extra) / cols}
		}
	}
	s := &Store{dev: dev, queue: dev, rows: rows, cols: cols, vbytes: 4, lo: opt.Offset, extra: len(opt.ExtraRows)}
	gather, gather4 := "feat_gather", "feat_gather4"
	if opt.BFloat16 {
		s.vbytes, gather, gather4 = 2, "feat_gather_bf16", "feat_gather_bf16x4"
	}
	mod, err := dev.LoadKernels("feature", kernelSrc)
	if err != nil {
		return nil, err
	}
	if s.gather, err = mod.Kernel(gather); err != nil {
		return nil, err
	}
	if s.gather4, err = mod.Kernel(gather4); err != nil {
		return nil, err
	}
	if opt.BFloat16 {
		if s.gatherH, err = mod.Kernel("feat_gather_b2b"); err != nil {
			return nil, err
		}
		if s.gatherH8, err = mod.Kernel("feat_gather_b2b8"); err != nil {
			return nil, err
		}
	}
	if rows == 0 && s.extra == 0 {
		return s, nil
	}
	// Hot rows: what the budget allows after the slot table.
	order := opt.Hot
	if order == nil {
		order = make([]graph.NodeID, rows)
		for i := range order {
			order[i] = graph.NodeID(i)
		}
	}
	rowBytes := int64(cols) * s.vbytes
	if avail := opt.BudgetBytes - 4*int64(rows); avail >= rowBytes {
		s.hotRows = int(min(avail/rowBytes, int64(len(order))))
	}
	if s.hotRows < rows && rows > 0 && !opt.NoHost {
		// Some rows are read from host memory (all of them without a
		// budget): the whole table, pinned and mapped, vbytes a value.
		if s.host, err = dev.AllocPinned(uint64(len(feats))*uint64(s.vbytes), true); err != nil {
			return nil, fmt.Errorf("feature: pinning the %d x %d table: %w", rows, cols, err)
		}
		if opt.BFloat16 {
			host := bf16s(s.host)
			chunks(rows, func(lo, hi int) { backend.ToBF16(host[lo*cols:hi*cols], feats[lo*cols:hi*cols]) })
		} else {
			host := s.host.Float32s()
			chunks(rows, func(lo, hi int) { copy(host[lo*cols:hi*cols], feats[lo*cols:hi*cols]) })
		}
	}
	if s.hotRows == 0 {
		if s.extra > 0 {
			if err := s.uploadHot(feats, nil, false, opt, opt.OnUpload); err != nil {
				s.Close()
				return nil, err
			}
		}
		return s, nil
	}
	slot := make([]int32, rows)
	for i := range slot {
		slot[i] = -1
	}
	for i, v := range order[:s.hotRows] {
		if v < 0 || int(v) >= rows {
			s.Close()
			return nil, &backend.IndexError{Op: "feature.New", Name: "Hot", Pos: i, Value: int64(v), Limit: rows}
		}
		if slot[v] >= 0 {
			s.Close()
			return nil, fmt.Errorf("feature: Hot[%d] = %d repeats an earlier node", i, v)
		}
		slot[v] = int32(i)
	}
	all := s.hotRows == rows
	if all {
		// Every row is hot: keep the table's own order.
		for v := range slot {
			slot[v] = int32(v)
		}
	}
	if err := s.upload(&s.slot, backend.Int32, slot); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.uploadHot(feats, order[:s.hotRows], all, opt, opt.OnUpload); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// uploadHot copies the hot rows (order's, or with all the table in its
// own order; with all, len(order) is the table's rows), then opt's extra
// rows, into a new device buffer, as bfloat16 in a bfloat16 store, in
// chunks of at most uploadChunk bytes. A chunk that is not the table
// as it is (reordered, or encoded as bfloat16) is built in one staging
// slice reused for the next chunk (Upload has read its source when it
// returns), so no second whole copy of the hot rows is made in host
// memory: at papers100M's size that copy would be 57 GB (28 GB bf16).
func (s *Store) uploadHot(feats []float32, order []graph.NodeID, all bool, opt Options, onUpload func(int64)) error {
	cols := s.cols
	dt := backend.Float32
	if s.vbytes == 2 {
		dt = backend.BFloat16
	}
	nh := len(order)
	total := nh + len(opt.ExtraRows)
	b, err := s.dev.Alloc(dt, total*cols)
	if err != nil {
		return fmt.Errorf("feature: device cache: %w", err)
	}
	s.hot = b
	step := int(max(int64(uploadChunk)/(int64(cols)*s.vbytes), 1)) // rows a chunk
	var f32 []float32
	var b16 []uint16
	for lo := 0; lo < total; lo += step {
		hi := min(lo+step, total)
		n := (hi - lo) * cols
		// row is the values of cache row lo+i.
		row := func(i int) []float32 {
			v := lo + i
			if v >= nh {
				r := int(opt.ExtraRows[v-nh])
				return opt.Extra[r*cols : (r+1)*cols]
			}
			if !all {
				v = int(order[v])
			}
			return feats[v*cols : (v+1)*cols]
		}
		var src any
		switch {
		case s.vbytes == 2:
			if b16 == nil {
				b16 = make([]uint16, min(step, total)*cols)
			}
			dst := b16[:n]
			chunks(hi-lo, func(a, z int) {
				for i := a; i < z; i++ {
					backend.ToBF16(dst[i*cols:(i+1)*cols], row(i))
				}
			})
			src = dst
		case all && hi <= nh:
			src = feats[lo*cols : hi*cols]
		default:
			if f32 == nil {
				f32 = make([]float32, min(step, total)*cols)
			}
			dst := f32[:n]
			chunks(hi-lo, func(a, z int) {
				for i := a; i < z; i++ {
					copy(dst[i*cols:(i+1)*cols], row(i))
				}
			})
			src = dst
		}
		v, err := backend.View(b, lo*cols, n)
		if err != nil {
			return fmt.Errorf("feature: device cache: %w", err)
		}
		if err := s.dev.Upload(v, src); err != nil {
			return err
		}
		if onUpload != nil {
			onUpload(int64(n) * s.vbytes)
		}
	}
	return nil
}

// chunks calls fn on one contiguous chunk of rows [0, n) per CPU (at
// least 4096 rows each) and waits: rows are independent, so the result
// does not depend on the split.
func chunks(n int, fn func(lo, hi int)) {
	parts := max(min(runtime.GOMAXPROCS(0), n/4096), 1)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { fn(n*p/parts, n*(p+1)/parts) })
	}
	wg.Wait()
}

func (s *Store) upload(dst *backend.Buffer, dt backend.DType, data any) error {
	n := 0
	switch v := data.(type) {
	case []int32:
		n = len(v)
	case []float32:
		n = len(v)
	case []uint16:
		n = len(v)
	}
	b, err := s.dev.Alloc(dt, n)
	if err != nil {
		return fmt.Errorf("feature: device cache: %w", err)
	}
	*dst = b
	return s.dev.Upload(b, data)
}

// Rows and Cols give the table's shape.
func (s *Store) Rows() int { return s.rows }

// Cols is the feature width.
func (s *Store) Cols() int { return s.cols }

// HotRows is the number of rows cached in device memory (with
// Options.ExtraRows').
func (s *Store) HotRows() int { return s.hotRows + s.extra }

// DeviceBytes is the device memory the store holds.
func (s *Store) DeviceBytes() int64 {
	var b int64
	if s.slot != nil {
		b = 4 * int64(s.rows)
	}
	return b + s.vbytes*int64(s.hotRows+s.extra)*int64(s.cols)
}

// NodeOrderTable returns the device copy of the table and true when it is
// the table as it is: every row hot (kept in node order then), float32
// (not BFloat16) and not a shard (Offset 0). The store owns it.
func (s *Store) NodeOrderTable() (backend.Buffer, bool) {
	if s.hot == nil || s.rows == 0 || s.hotRows != s.rows || s.vbytes != 4 || s.lo != 0 || s.extra != 0 {
		return nil, false
	}
	return s.hot, true
}

// CachedTable returns the device buffer of the hot rows (HotRows x
// Cols float32, row i the i-th node of Options.Hot) and true when some
// rows but not all are hot (all hot keeps node order: NodeOrderTable),
// at float32, and the store is not a shard (Offset 0). The store owns
// it.
func (s *Store) CachedTable() (backend.Buffer, bool) {
	if s.hot == nil || s.hotRows <= 0 || s.hotRows >= s.rows || s.vbytes != 4 || s.lo != 0 {
		return nil, false
	}
	return s.hot, true
}

// BFloat16 reports whether the table is kept as bfloat16 (Options).
func (s *Store) BFloat16() bool { return s.vbytes == 2 }

// bf16s is h's memory as bfloat16 encodings.
func bf16s(h backend.HostBuffer) []uint16 {
	b := h.Bytes()
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// Gather writes the rows of nodes (an int32 device buffer, each in
// [0, Rows())) into dst (len(nodes) x Cols() float32 device buffer), both
// buffers of the store's device. Bad node ids zero their row and are
// reported by the device's next Synchronize as a *backend.IndexError.
// A BFloat16 store also gathers into a bfloat16 dst (its values as they
// are; with GatherDropout's dropout, each product rounded to nearest
// even: the float32 gather followed by Convert, bit for bit).
func (s *Store) Gather(dst, nodes backend.Buffer) error {
	return s.gather1("feature.Gather", dst, nodes, 0, 0)
}

// GatherDropout is Gather followed by input dropout, in the same pass:
// dst is what Gather and then backend.Dropout(dst, mask, dst, p, seed)
// would leave (element k of dst kept iff rng.DropUniform(seed, k) >= p,
// then scaled by 1/(1-p)), without the mask or a second pass over dst.
// p must be in [0, 1).
func (s *Store) GatherDropout(dst, nodes backend.Buffer, p float32, seed uint64) error {
	const op = "feature.GatherDropout"
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	return s.gather1(op, dst, nodes, p, seed)
}

// GatherStaged is Gather with rows staged by the host: where spos (n
// int32 in device-readable memory, e.g. mapped pinned) holds j >= 0 for
// batch position i, row i of dst is row j of staged (nstaged x Cols()
// float32, device-readable); where it holds -2 - j, extra row j
// (Options.ExtraRows); where it holds -1, the store's row of nodes[i].
// A j outside [0, nstaged) or past the extra rows zeroes its row and is
// reported like a bad node. Every row, staged or not, gets GatherDropout's input
// dropout (p in [0, 1); 0 is none). The caller keeps spos and staged
// unchanged until the gather has run.
func (s *Store) GatherStaged(dst, nodes backend.Buffer, spos, staged backend.DevPtr, nstaged int64, p float32, seed uint64) error {
	const op = "feature.GatherStaged"
	if spos == 0 || (staged == 0 && nstaged > 0) || nstaged < 0 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("staging at %#x, rows at %#x for %d rows", spos, staged, nstaged)}
	}
	if err := backend.CheckDropoutRate(op, p); err != nil {
		return err
	}
	return s.gather2(op, dst, nodes, p, seed, spos, staged, nstaged)
}

func (s *Store) gather1(op string, dst, nodes backend.Buffer, p float32, seed uint64) error {
	return s.gather2(op, dst, nodes, p, seed, 0, 0, 0)
}

func (s *Store) gather2(op string, dst, nodes backend.Buffer, p float32, seed uint64, spos, staged backend.DevPtr, nstaged int64) error {
	keep := float32(1)
	if p != 0 {
		keep = 1 / (1 - p)
	}
	if nodes == nil || nodes.DType() != backend.Int32 {
		return &backend.ShapeError{Op: op, Msg: "nodes must be an int32 buffer on the store's device"}
	}
	n := nodes.Len()
	dt := backend.Float32
	if dst != nil && dst.DType() == backend.BFloat16 {
		// A bfloat16 batch (trainers with bfloat16 activations), from
		// a bfloat16 table only.
		if s.vbytes != 2 {
			return &backend.ShapeError{Op: op, Msg: "a bfloat16 dst needs a bfloat16 table (Options.BFloat16)"}
		}
		dt = backend.BFloat16
	}
	if err := backend.CheckLen(op, "dst", dst, dt, n*s.cols); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	gather, vec, width := s.gather, s.gather4, 4
	if dt == backend.BFloat16 {
		gather, vec, width = s.gatherH, s.gatherH8, 8
	}
	return s.queue.Enqueue(func(q backend.Queue) error {
		// The queue refuses buffers of another device (ShapeError).
		slot, err := q.IndexSlot(op, "nodes", nodes, int(s.lo)+s.rows)
		if err != nil {
			return err
		}
		var cold backend.DevPtr
		if s.host != nil {
			cold = s.host.DeviceAddr()
		}
		// Vector loads of four values: 16 bytes (float32) or 8
		// (bfloat16); into a bfloat16 dst, of eight (16 bytes). The
		// table's and the hot rows' starts are allocation starts, so
		// row alignment follows from cols % width. The staged rows
		// start 16-byte aligned for the vector form.
		if s.cols%width == 0 && q.Aligned(dst, 16) && staged%16 == 0 {
			return q.Launch(vec, int64(n)*int64(s.cols/width), backend.Buf(dst), backend.Buf(nodes), backend.I64(int64(n)),
				backend.Buf(s.slot), backend.Buf(s.hot), backend.Addr(cold), backend.I64(int64(s.rows)), backend.I64(int64(s.cols/width)), backend.U64(slot),
				backend.F32(p), backend.F32(keep), backend.U64(seed), backend.I64(s.lo), backend.Addr(spos), backend.Addr(staged), backend.I64(nstaged),
				backend.I64(int64(s.hotRows)), backend.I64(int64(s.extra)))
		}
		return q.Launch(gather, int64(n)*int64(s.cols), backend.Buf(dst), backend.Buf(nodes), backend.I64(int64(n)),
			backend.Buf(s.slot), backend.Buf(s.hot), backend.Addr(cold), backend.I64(int64(s.rows)), backend.I64(int64(s.cols)), backend.U64(slot),
			backend.F32(p), backend.F32(keep), backend.U64(seed), backend.I64(s.lo), backend.Addr(spos), backend.Addr(staged), backend.I64(nstaged),
			backend.I64(int64(s.hotRows)), backend.I64(int64(s.extra)))
	})
}

// Close releases device and pinned memory.
func (s *Store) Close() error {
	if s == nil {
		return nil
	}
	s.dev.Free(s.hot)
	s.dev.Free(s.slot)
	s.hot, s.slot = nil, nil
	if s.host != nil {
		err := s.host.Free()
		s.host = nil
		return err
	}
	return nil
}
