package cuda

import (
	"fmt"
	"math"
	"unsafe"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Sparse is a CSR matrix in device memory. Its transpose (CSC) is built on
// the device the first time a transposed product needs it, by a stable
// sort of the edges by column, and cached: per column it lists rows in
// increasing edge order, so transposed products are deterministic and
// sum in the same order as the CPU back end.
type Sparse struct {
	dev              *Device
	rows, cols, nnz  int
	ptr, col         *Buffer // int64 rows+1, int32 nnz
	tptr, trow, teid *Buffer // transpose: int64 cols+2 (first cols+1 used), int32 nnz, int64 nnz
	uniform          bool    // uniformRows of the CSR (false when built on the device)
	split            *split  // the CSR's long rows cut (splitRows), nil when none
}

// split is a CSR whose rows longer than splitLen entries are cut into
// pieces of at most splitLen, for the one-head float32 SpMM (spmm1Split):
// one warp sums a row in edge order, so a row of 200,000 entries (a hub
// of a power-law graph in a whole-neighborhood block) kept one warp busy
// while the rest of the device idled. vptr delimits the pieces (nv of
// them, in the CSR's edge order: the row pointers with the cuts added),
// sptr the pieces of each row (rows+1), iota holds 0..nv-1 (the pieces'
// columns in the second pass).
type split struct {
	vptr, sptr, iota   *Buffer
	nv                 int
	vuniform, suniform bool
}

// splitLen is the longest row the one-head SpMM leaves whole (a
// variable for the tests).
var splitLen int64 = 2048

var _ backend.Sparse = (*Sparse)(nil)

// NumRows returns the number of rows.
func (s *Sparse) NumRows() int { return s.rows }

// NumCols returns the number of columns.
func (s *Sparse) NumCols() int { return s.cols }

// NNZ returns the number of stored entries.
func (s *Sparse) NNZ() int { return s.nnz }

// Indptr returns the device buffer of row pointers (int64, rows+1).
func (s *Sparse) Indptr() *Buffer { return s.ptr }

// Indices returns the device buffer of column indices (int32, nnz).
func (s *Sparse) Indices() *Buffer { return s.col }

// NewSparse validates a host CSR matrix and uploads it.
func (d *Device) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	const op = "NewSparse"
	if err := backend.CheckCSR(op, rows, cols, indptr, indices); err != nil {
		return nil, err
	}
	if len(indices) >= 1<<31-1 {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%d entries: the cuda back end supports fewer than 2^31-1", len(indices))}
	}
	ptr, err := d.Alloc(backend.Int64, rows+1)
	if err != nil {
		return nil, err
	}
	col, err := d.Alloc(backend.Int32, len(indices))
	if err != nil {
		d.Free(ptr)
		return nil, err
	}
	if err := d.Upload(ptr, indptr); err != nil {
		d.Free(ptr)
		d.Free(col)
		return nil, err
	}
	if err := d.Upload(col, indices); err != nil {
		d.Free(ptr)
		d.Free(col)
		return nil, err
	}
	out := &Sparse{dev: d, rows: rows, cols: cols, nnz: len(indices), ptr: ptr.(*Buffer), col: col.(*Buffer), uniform: uniformRows(indptr)}
	if out.split, err = d.newSplit(indptr); err != nil {
		d.FreeSparse(out)
		return nil, err
	}
	return out, nil
}

// splitRows returns the row pointers of the pieces of a CSR with these
// row pointers whose rows are cut every max entries (vptr, nv+1 entries)
// and each row's first piece (sptr, rows+1 entries), or nils when no row
// is longer than max.
func splitRows(indptr []int64, max int64) (vptr, sptr []int64) {
	rows := len(indptr) - 1
	extra := 0
	for r := range rows {
		if n := indptr[r+1] - indptr[r]; n > max {
			extra += int((n+max-1)/max) - 1
		}
	}
	if extra == 0 {
		return nil, nil
	}
	vptr = make([]int64, 0, rows+extra+1)
	sptr = make([]int64, rows+1)
	for r := range rows {
		sptr[r] = int64(len(vptr))
		vptr = append(vptr, indptr[r])
		for p := indptr[r] + max; p < indptr[r+1]; p += max {
			vptr = append(vptr, p)
		}
	}
	sptr[rows] = int64(len(vptr))
	return append(vptr, indptr[rows]), sptr
}

// newSplit uploads the cut of a CSR with these row pointers (splitRows
// at splitLen), nil when no row is that long.
func (d *Device) newSplit(indptr []int64) (*split, error) {
	vptr, sptr := splitRows(indptr, splitLen)
	if vptr == nil {
		return nil, nil
	}
	nv := len(vptr) - 1
	iota := make([]int32, nv)
	for i := range iota {
		iota[i] = int32(i)
	}
	sp := &split{nv: nv, vuniform: uniformRows(vptr), suniform: uniformRows(sptr)}
	for _, b := range []struct {
		dst **Buffer
		dt  backend.DType
		src any
		n   int
	}{{&sp.vptr, backend.Int64, vptr, nv + 1}, {&sp.sptr, backend.Int64, sptr, len(sptr)}, {&sp.iota, backend.Int32, iota, nv}} {
		buf, err := d.Alloc(b.dt, b.n)
		if err == nil {
			*b.dst = buf.(*Buffer)
			err = d.Upload(buf, b.src)
		}
		if err != nil {
			sp.free(d)
			return nil, err
		}
	}
	return sp, nil
}

func (sp *split) free(d *Device) {
	for _, b := range []*Buffer{sp.vptr, sp.sptr, sp.iota} {
		if b != nil {
			d.Free(b)
		}
	}
}

// NewSparseFromDevice wraps device-built CSR buffers (int64 ptr of rows+1,
// int32 col of nnz) as a Sparse without a host round trip; the Sparse
// takes ownership. The contents are trusted (built by Strata's own
// kernels), only the lengths are checked.
func (d *Device) NewSparseFromDevice(rows, cols int, ptr, col *Buffer) (*Sparse, error) {
	const op = "NewSparseFromDevice"
	if rows < 0 || cols < 0 || rows > math.MaxInt32 || cols > math.MaxInt32 {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("shape %d x %d out of range", rows, cols)}
	}
	if _, err := d.asBuf(op, "ptr", ptr, backend.Int64, rows+1); err != nil {
		return nil, err
	}
	if col == nil {
		return nil, &backend.ShapeError{Op: op, Msg: "col is nil"}
	}
	if _, err := d.asBuf(op, "col", col, backend.Int32, col.n); err != nil {
		return nil, err
	}
	return &Sparse{dev: d, rows: rows, cols: cols, nnz: col.n, ptr: ptr, col: col}, nil
}

// FreeSparse releases a's device memory.
func (d *Device) FreeSparse(a backend.Sparse) {
	s, ok := a.(*Sparse)
	if !ok || s == nil || s.dev != d {
		return
	}
	for _, b := range []*Buffer{s.ptr, s.col, s.tptr, s.trow, s.teid} {
		if b != nil {
			d.Free(b)
		}
	}
	if s.split != nil {
		s.split.free(d)
	}
	s.rows, s.cols, s.nnz = 0, 0, 0
	s.ptr, s.col, s.tptr, s.trow, s.teid, s.split = nil, nil, nil, nil, nil, nil
}

func (d *Device) asSparse(op string, a backend.Sparse) (*Sparse, error) {
	s, ok := a.(*Sparse)
	if !ok || s == nil {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("a is %T, not a cuda Sparse", a)}
	}
	if s.dev != d {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("a lives on %s, not %s", s.dev.name, d.name)}
	}
	if s.ptr == nil {
		return nil, &backend.ShapeError{Op: op, Msg: "a was freed"}
	}
	return s, nil
}

// BuildTranspose builds a's transpose (CSC) now on d's stream, when it is
// not built yet, instead of at the first transposed product: a pipeline
// stage builds it on its own stream, off the trainer's (AliasSparse then
// hands it on).
func (d *Device) BuildTranspose(a backend.Sparse) error {
	s, err := d.asSparse("BuildTranspose", a)
	if err != nil {
		return err
	}
	return d.run(func() error {
		if s.tptr != nil {
			return nil
		}
		return d.transposeLocked(s)
	})
}

// AliasSparse returns a matrix of d over a's memory, where a is a matrix
// of another handle of the same GPU (or of d): its CSR and, when built,
// its transpose, aliased with no copy (Alias). A transpose d builds later
// is d's own. FreeSparse of the alias frees only that; a's buffers stay
// a's, which the caller frees after d's stream is done with the alias.
func (d *Device) AliasSparse(a backend.Sparse) (backend.Sparse, error) {
	s, ok := a.(*Sparse)
	if !ok || s == nil || s.ptr == nil {
		return nil, fmt.Errorf("cuda: AliasSparse of a %T (nil or freed?)", a)
	}
	out := &Sparse{dev: d, rows: s.rows, cols: s.cols, nnz: s.nnz, uniform: s.uniform}
	for _, p := range []struct {
		dst **Buffer
		src *Buffer
	}{{&out.ptr, s.ptr}, {&out.col, s.col}, {&out.tptr, s.tptr}, {&out.trow, s.trow}, {&out.teid, s.teid}} {
		if p.src == nil {
			continue
		}
		b, err := d.Alias(p.src)
		if err != nil {
			return nil, fmt.Errorf("cuda: AliasSparse: %w", err)
		}
		*p.dst = b.(*Buffer)
	}
	if sp := s.split; sp != nil {
		out.split = &split{nv: sp.nv, vuniform: sp.vuniform, suniform: sp.suniform}
		for _, p := range []struct{ dst, src **Buffer }{{&out.split.vptr, &sp.vptr}, {&out.split.sptr, &sp.sptr}, {&out.split.iota, &sp.iota}} {
			b, err := d.Alias(*p.src)
			if err != nil {
				return nil, fmt.Errorf("cuda: AliasSparse: %w", err)
			}
			*p.dst = b.(*Buffer)
		}
	}
	return out, nil
}

// view is one orientation of a sparse matrix.
type view struct {
	ptr, col, eid cu.DevPtr // eid 0: edge id is the position
	rows, cols    int
	nnz           int
	uniform       bool // neighboring rows have similar lengths (uniformRows)
	short         bool // rows of shortRow entries or fewer on average (shortRows)
}

// shortRow is the mean row length up to which the one-head SpMM takes
// its short-row kernels: a sampled block's rows hold at most the
// fanout's edges (5 to 15 in the usual settings), too few for a warp to
// keep 8 rows' loads in flight (BenchmarkSpMMSampled).
const shortRow = 16

// shortRows reports whether a CSR of rows rows and nnz entries has rows
// of shortRow entries or fewer on average (never when shortKernels is
// off).
func shortRows(rows, nnz int) bool { return shortKernels && int64(nnz) <= shortRow*int64(rows) }

// shortKernels turns the short-row kernels on (a variable for the
// benchmarks' comparison).
var shortKernels = true

// viewLocked returns the CSR or, building it on first use, the CSC.
func (d *Device) viewLocked(s *Sparse, transpose bool) (view, error) {
	if !transpose {
		return view{ptr: s.ptr.ptr, col: s.col.ptr, rows: s.rows, cols: s.cols, nnz: s.nnz, uniform: s.uniform, short: shortRows(s.rows, s.nnz)}, nil
	}
	if s.tptr == nil {
		if err := d.transposeLocked(s); err != nil {
			return view{}, err
		}
	}
	return view{ptr: s.tptr.ptr, col: s.trow.ptr, eid: s.teid.ptr, rows: s.cols, cols: s.rows, nnz: s.nnz, short: shortRows(s.cols, s.nnz)}, nil
}

// transposeLocked builds the CSC of s on the device.
func (d *Device) transposeLocked(s *Sparse) error {
	ptr, order, err := d.bucket(s.col, s.cols, 0)
	if err != nil {
		return err
	}
	sc := &scratch{d: d}
	rowsOf := sc.alloc(backend.Int32, s.nnz)
	trow := sc.alloc(backend.Int32, s.nnz)
	teid := sc.alloc(backend.Int64, s.nnz)
	if sc.err != nil {
		sc.release()
		d.freeLocked(ptr)
		d.freeLocked(order)
		return sc.err
	}
	err = d.launchN("csr_edge_rows", int64(s.nnz), uint64(rowsOf.ptr), uint64(s.ptr.ptr), cu.I64(int64(s.rows)), cu.I64(int64(s.nnz)))
	if err == nil {
		err = d.launchN("csr_transpose_fill", int64(s.nnz), uint64(trow.ptr), uint64(teid.ptr), uint64(order.ptr), uint64(rowsOf.ptr), cu.I64(int64(s.nnz)))
	}
	d.freeLocked(order)
	if err != nil {
		sc.release()
		d.freeLocked(ptr)
		return err
	}
	sc.release(trow, teid)
	s.tptr, s.trow, s.teid = ptr, trow, teid
	return nil
}

// SpMM computes out = A x (or A^T x) with optional per-edge, per-head
// weights: one warp per output row, edges summed in order (one head: the
// spmm1 kernels of kernels/spmm.cu; several: the generic spmm kernel).
func (d *Device) SpMM(out backend.Buffer, a backend.Sparse, transpose bool, x backend.Buffer, w backend.Buffer, heads, width int) error {
	const op = "SpMM"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	orows, ocols := s.rows, s.cols
	if transpose {
		orows, ocols = s.cols, s.rows
	}
	on, xn, err := backend.SpMMShape(op, orows, ocols, heads, width, w != nil)
	if err != nil {
		return err
	}
	ov, err := d.float(op, "out", out, on)
	if err != nil {
		return err
	}
	xv, err := d.asBuf(op, "x", x, ov.dt, xn)
	if err != nil {
		return err
	}
	half := ov.dt == backend.BFloat16
	if half && heads != 1 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("bfloat16 operands with %d heads: want one", heads)}
	}
	wp, err := d.edgeWeights(op, w, s.nnz, heads)
	if err != nil {
		return err
	}
	if on == 0 {
		return nil
	}
	return d.run(func() error {
		v, err := d.viewLocked(s, transpose)
		if err != nil {
			return err
		}
		if half {
			return d.spmm1BF16(v, ov, xv, wp, width, nil)
		}
		if heads == 1 && !transpose && s.split != nil {
			return d.spmm1Split(v, s.split, ov, xv, wp, width, nil)
		}
		if heads == 1 {
			return d.spmm1(v, ov, xv, wp, width, nil)
		}
		return d.launchWarps("spmm", int64(v.rows), uint64(ov.ptr), uint64(v.ptr), uint64(v.col), uint64(v.eid), uint64(wp), uint64(xv.ptr),
			cu.I64(int64(v.rows)), cu.I64(int64(width)), cu.I64(int64(heads)))
	})
}

// edgeWeights checks w, float32 nnz x heads or nil (ones), and returns
// its pointer (0 for nil).
func (d *Device) edgeWeights(op string, w backend.Buffer, nnz, heads int) (cu.DevPtr, error) {
	if w == nil {
		return 0, nil
	}
	wn, err := backend.Dims(op, nnz, heads)
	if err != nil {
		return 0, err
	}
	wv, err := d.f32(op, "w", w, wn)
	if err != nil {
		return 0, err
	}
	return wv.ptr, nil
}

// spmmKernel is a one-head SpMM kernel of kernels/spmm.cu and how many
// output rows one warp computes.
type spmmKernel struct {
	name        string
	rowsPerWarp int
}

// spmm1Kernel picks the one-head SpMM kernel for width columns: 16-byte
// loads when vec (width % 4 == 0 and both matrices 16-byte aligned), else
// 4-byte loads; uniform says neighboring rows have similar lengths (see
// uniformRows), short that they are short (shortRows: two rows a warp,
// two edges' loads in flight). The choices are the fastest of BenchmarkSpMMVariants on
// the products graph (widths 47, 100 and 256) and their neighbors for
// other widths: several rows per warp for narrow rows (4-byte loads up to
// 48 columns; 16-byte loads up to 128 columns when the rows are uniform),
// one warp per row otherwise.
func spmm1Kernel(width int, vec, uniform, short bool) spmmKernel {
	if vec {
		switch w4 := width / 4; {
		case w4 <= 32 && short:
			return spmmKernel{"spmm1_v2s", 2}
		case w4 <= 32 && uniform:
			return spmmKernel{"spmm1_v2g", 2}
		case w4 <= 32:
			return spmmKernel{"spmm1_v1", 1}
		case w4 <= 64:
			return spmmKernel{"spmm1_v2", 1}
		default:
			return spmmKernel{"spmm1_v4", 1}
		}
	}
	switch {
	case width <= 32:
		return spmmKernel{"spmm1_s4g", 4}
	case width <= 48:
		return spmmKernel{"spmm1_s6g", 4}
	case width <= 64:
		return spmmKernel{"spmm1_s2", 1}
	case width <= 128:
		return spmmKernel{"spmm1_s4", 1}
	default:
		return spmmKernel{"spmm1_s8", 1}
	}
}

// uniformRows reports whether the rows of a CSR with these row pointers
// come in pairs of similar length: the lengths of rows 2i and 2i+1 differ
// by at most a quarter of the entries in total. Then kernels that put
// several rows in one warp waste little (nodes ordered by degree give
// this; random orders of power-law graphs do not).
func uniformRows(indptr []int64) bool {
	rows := len(indptr) - 1
	if rows < 2 {
		return false
	}
	var diff int64
	for i := 0; i+1 < rows; i += 2 {
		a, b := indptr[i+1]-indptr[i], indptr[i+2]-indptr[i+1]
		diff += max(a-b, b-a)
	}
	return 4*diff <= indptr[rows]
}

// spmm1 runs the one-head SpMM over view v (one block of 256 threads per
// 8 warps' rows, no grid stride, so rows of very different degrees are
// balanced by the block scheduler). With self (SpMMConcat's x) each
// output row is 2*width wide: self's row, then the sums.
func (d *Device) spmm1(v view, out, x *Buffer, w cu.DevPtr, width int, self *Buffer) error {
	vec := width%4 == 0 && out.ptr%16 == 0 && x.ptr%16 == 0 && (self == nil || self.ptr%16 == 0)
	k := spmm1Kernel(width, vec, v.uniform, v.short)
	n := int64(width)
	if vec {
		n = int64(width / 4)
	}
	return d.launchSpMM1(k, v, out, x, w, n, self)
}

// launchSpMM1 launches one-head SpMM kernel k over view v, rows n vectors
// wide (self: see spmm1).
func (d *Device) launchSpMM1(k spmmKernel, v view, out, x *Buffer, w cu.DevPtr, n int64, self *Buffer) error {
	ldo, sp := n, cu.DevPtr(0)
	if self != nil {
		ldo, sp = 2*n, self.ptr
	}
	perBlock := int64(threads / 32 * k.rowsPerWarp)
	blocks := (int64(v.rows) + perBlock - 1) / perBlock
	return d.launchGrid(k.name, cu.D1(int(blocks)), cu.D1(threads), uint64(out.ptr), uint64(v.ptr), uint64(v.col), uint64(v.eid), uint64(w),
		uint64(x.ptr), cu.I64(int64(v.rows)), cu.I64(n), cu.I64(ldo), uint64(sp))
}

// spmm1Split is spmm1 over a CSR with long rows (Sparse.split): the
// pieces' sums first (spmm1 over the pieces, which share the CSR's
// columns and edge positions, so the weights stay each edge's), into a
// scratch of nv rows, then each row's pieces added in order (spmm1 of
// the rows' pieces with no weights: an exact add each). A row of one
// piece is copied bit for bit; a cut row's sum is its pieces' sums
// added, the same on every run.
func (d *Device) spmm1Split(v view, sp *split, out, x *Buffer, w cu.DevPtr, width int, self *Buffer) error {
	pieces, err := d.allocLocked(backend.Float32, sp.nv*width)
	if err != nil {
		return err
	}
	defer d.freeLocked(pieces)
	vv := view{ptr: sp.vptr.ptr, col: v.col, eid: v.eid, rows: sp.nv, cols: v.cols, nnz: v.nnz, uniform: sp.vuniform, short: shortRows(sp.nv, v.nnz)}
	if err := d.spmm1(vv, pieces, x, w, width, nil); err != nil {
		return err
	}
	sv := view{ptr: sp.sptr.ptr, col: sp.iota.ptr, rows: v.rows, cols: sp.nv, nnz: sp.nv, uniform: sp.suniform, short: shortRows(v.rows, sp.nv)}
	return d.spmm1(sv, out, pieces, 0, width, self)
}

// spmm1BF16 is spmm1 on bfloat16 x and out: the kernel spmm1 would pick
// for the same number of vectors a row, on vectors of 8 bfloat16 (16
// bytes, as a float4) when width % 8 == 0, of 4 (8 bytes) when width % 4
// == 0, else on single values; "_b8", "_b4" or "_b1" after its name.
// Each sums in float32 in edge order as the float32 kernels do, and
// rounds once on store.
func (d *Device) spmm1BF16(v view, out, x *Buffer, w cu.DevPtr, width int, self *Buffer) error {
	aligned := func(a uint64) bool {
		return out.ptr%cu.DevPtr(a) == 0 && x.ptr%cu.DevPtr(a) == 0 && (self == nil || self.ptr%cu.DevPtr(a) == 0)
	}
	var k spmmKernel
	n := int64(width)
	switch {
	case width%8 == 0 && aligned(16):
		n = int64(width / 8)
		k = spmm1Kernel(int(4*n), true, v.uniform, v.short)
		k.name += "_b8"
	case width%4 == 0 && aligned(8):
		n = int64(width / 4)
		k = spmm1Kernel(width, true, v.uniform, v.short)
		k.name += "_b4"
	default:
		k = spmm1Kernel(width, false, v.uniform, v.short)
		k.name += "_b1"
	}
	return d.launchSpMM1(k, v, out, x, w, n, self)
}

// SpMMConcat writes [x's first rows | A x] (backend.ConcatAggregator):
// the one-head SpMM kernels, each output row 2*width wide, its first
// half copied from x by the same lanes.
func (d *Device) SpMMConcat(out backend.Buffer, a backend.Sparse, x, w backend.Buffer, width int) error {
	const op = "SpMMConcat"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	on, xn, err := backend.SpMMConcatShape(op, s.rows, s.cols, width)
	if err != nil {
		return err
	}
	ov, err := d.float(op, "out", out, on)
	if err != nil {
		return err
	}
	xv, err := d.asBuf(op, "x", x, ov.dt, xn)
	if err != nil {
		return err
	}
	wp, err := d.edgeWeights(op, w, s.nnz, 1)
	if err != nil {
		return err
	}
	if on == 0 {
		return nil
	}
	return d.run(func() error {
		v, err := d.viewLocked(s, false)
		if err != nil {
			return err
		}
		switch {
		case ov.dt == backend.BFloat16:
			return d.spmm1BF16(v, ov, xv, wp, width, xv)
		case s.split != nil:
			return d.spmm1Split(v, s.split, ov, xv, wp, width, xv)
		}
		return d.spmm1(v, ov, xv, wp, width, xv)
	})
}

// SDDMM computes per-edge values from destination features u and source
// features v: one thread per (edge, head).
func (d *Device) SDDMM(sop backend.SDDMMOp, out backend.Buffer, a backend.Sparse, u, v backend.Buffer, heads, dim int) error {
	const op = "SDDMM"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	un, vn, en, err := backend.SDDMMShape(op, sop, s.rows, s.cols, s.nnz, heads, dim)
	if err != nil {
		return err
	}
	ov, err := d.f32(op, "out", out, en)
	if err != nil {
		return err
	}
	uv, err := d.f32(op, "u", u, un)
	if err != nil {
		return err
	}
	vv, err := d.f32(op, "v", v, vn)
	if err != nil {
		return err
	}
	if en == 0 {
		return nil
	}
	code := int32(1)
	if sop == backend.SDDMMAdd {
		code = 2
	}
	return d.run(func() error {
		return d.launchN("sddmm", int64(en), uint64(ov.ptr), uint64(s.ptr.ptr), uint64(s.col.ptr), uint64(uv.ptr), uint64(vv.ptr),
			cu.I64(int64(s.rows)), cu.I64(int64(s.nnz)), cu.I64(int64(heads)), cu.I64(int64(dim)), cu.I32(code))
	})
}

// EdgeSum reduces per-edge values to rows (or columns when transpose).
func (d *Device) EdgeSum(out backend.Buffer, a backend.Sparse, transpose bool, e backend.Buffer, heads int) error {
	const op = "EdgeSum"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	orows := s.rows
	if transpose {
		orows = s.cols
	}
	on, en, err := backend.EdgeSumShape(op, orows, s.nnz, heads)
	if err != nil {
		return err
	}
	ov, err := d.f32(op, "out", out, on)
	if err != nil {
		return err
	}
	ev, err := d.f32(op, "e", e, en)
	if err != nil {
		return err
	}
	if on == 0 {
		return nil
	}
	return d.run(func() error {
		v, err := d.viewLocked(s, transpose)
		if err != nil {
			return err
		}
		return d.launchN("edge_sum", int64(on), uint64(ov.ptr), uint64(v.ptr), uint64(v.eid), uint64(ev.ptr), cu.I64(int64(v.rows)), cu.I64(int64(heads)))
	})
}

func (d *Device) edgeArgs(op string, a backend.Sparse, heads int) (*Sparse, int, error) {
	s, err := d.asSparse(op, a)
	if err != nil {
		return nil, 0, err
	}
	n, err := backend.EdgeShape(op, s.nnz, heads)
	return s, n, err
}

// EdgeSoftmax normalizes scores over each row's edges, per head.
func (d *Device) EdgeSoftmax(out backend.Buffer, a backend.Sparse, scores backend.Buffer, heads int) error {
	const op = "EdgeSoftmax"
	s, n, err := d.edgeArgs(op, a, heads)
	if err != nil {
		return err
	}
	ov, err := d.f32(op, "out", out, n)
	if err != nil {
		return err
	}
	sv, err := d.f32(op, "scores", scores, n)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("edge_softmax", int64(s.rows)*int64(heads), uint64(ov.ptr), uint64(s.ptr.ptr), uint64(sv.ptr), cu.I64(int64(s.rows)), cu.I64(int64(heads)))
	})
}

// EdgeSoftmaxBackward computes ds = y * (dy - rowsum(y*dy)) per row, head.
func (d *Device) EdgeSoftmaxBackward(ds backend.Buffer, a backend.Sparse, y, dy backend.Buffer, heads int) error {
	const op = "EdgeSoftmaxBackward"
	s, n, err := d.edgeArgs(op, a, heads)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "ds", ds, n)
	if err != nil {
		return err
	}
	yv, err := d.f32(op, "y", y, n)
	if err != nil {
		return err
	}
	gv, err := d.f32(op, "dy", dy, n)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("edge_softmax_backward", int64(s.rows)*int64(heads), uint64(dv.ptr), uint64(s.ptr.ptr), uint64(yv.ptr), uint64(gv.ptr), cu.I64(int64(s.rows)), cu.I64(int64(heads)))
	})
}

// RowDegreeInv writes 1/max(deg, 1) per row (or column when transpose).
func (d *Device) RowDegreeInv(out backend.Buffer, a backend.Sparse, transpose bool) error {
	const op = "RowDegreeInv"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	orows := s.rows
	if transpose {
		orows = s.cols
	}
	ov, err := d.f32(op, "out", out, orows)
	if err != nil {
		return err
	}
	if orows == 0 {
		return nil
	}
	return d.run(func() error {
		v, err := d.viewLocked(s, transpose)
		if err != nil {
			return err
		}
		return d.launchN("row_degree_inv", int64(v.rows), uint64(ov.ptr), uint64(v.ptr), cu.I64(int64(v.rows)))
	})
}

// ExpandRowsToEdges writes out[e] = v[row(e)].
func (d *Device) ExpandRowsToEdges(out backend.Buffer, a backend.Sparse, v backend.Buffer) error {
	const op = "ExpandRowsToEdges"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	ov, err := d.f32(op, "out", out, s.nnz)
	if err != nil {
		return err
	}
	vv, err := d.f32(op, "v", v, s.rows)
	if err != nil {
		return err
	}
	if s.nnz == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("expand_rows_to_edges", int64(s.nnz), uint64(ov.ptr), uint64(s.ptr.ptr), uint64(vv.ptr), cu.I64(int64(s.rows)), cu.I64(int64(s.nnz)))
	})
}

// MeanEdgeWeights returns 1/max(deg, 1) of each entry's row in a new
// buffer (backend.MeanWeighter): RowDegreeInv and ExpandRowsToEdges in
// one launch, without a search per entry or a memset. A thread per row
// where rows are short (sampled blocks), a warp per row where they
// average over 32 entries.
func (d *Device) MeanEdgeWeights(a backend.Sparse) (backend.Buffer, error) {
	const op = "MeanEdgeWeights"
	s, err := d.asSparse(op, a)
	if err != nil {
		return nil, err
	}
	var out *Buffer
	err = d.run(func() error {
		if out, err = d.allocLocked(backend.Float32, s.nnz); err != nil || s.nnz == 0 {
			return err
		}
		if int64(s.nnz) > 32*int64(s.rows) {
			return d.launchWarps("mean_edge_weights_warp", int64(s.rows), uint64(out.ptr), uint64(s.ptr.ptr), cu.I64(int64(s.rows)))
		}
		return d.launchN("mean_edge_weights", int64(s.rows), uint64(out.ptr), uint64(s.ptr.ptr), cu.I64(int64(s.rows)))
	})
	if err != nil {
		if out != nil {
			d.Free(out)
		}
		return nil, err
	}
	return out, nil
}

// AddSelfLoops returns a new Sparse: a with the entry (i, i) appended to
// every row i that lacks one (nn.SparseDeriver). Built on the device; the
// new entry count is read back, which waits for queued work once.
func (d *Device) AddSelfLoops(a backend.Sparse) (backend.Sparse, error) {
	const op = "AddSelfLoops"
	s, err := d.asSparse(op, a)
	if err != nil {
		return nil, err
	}
	if s.rows > s.cols {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%d rows but %d columns: row i needs column i", s.rows, s.cols)}
	}
	if int64(s.nnz)+int64(s.rows) >= 1<<31-1 {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("%d entries and %d rows: the cuda back end supports fewer than 2^31-1 entries", s.nnz, s.rows)}
	}
	leave, err := d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	cnt, err := d.allocLocked(backend.Int64, s.rows+1)
	if err != nil {
		return nil, err
	}
	defer d.freeLocked(cnt)
	ptr, err := d.allocLocked(backend.Int64, s.rows+1)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (backend.Sparse, error) { d.freeLocked(ptr); return nil, err }
	if err := d.launchN("self_loop_count", int64(s.rows)+1, uint64(cnt.ptr), uint64(s.ptr.ptr), uint64(s.col.ptr), cu.I64(int64(s.rows))); err != nil {
		return fail(err)
	}
	if err := d.scanI64(ptr.ptr, cnt.ptr, int64(s.rows)+1); err != nil {
		return fail(err)
	}
	res := unsafe.Add(d.host, offResult)
	if err := cu.MemcpyDtoHAsync(res, ptr.ptr+cu.DevPtr(8*s.rows), 8, d.stream); err != nil {
		return fail(err)
	}
	if err := d.stream.Synchronize(); err != nil {
		return fail(err)
	}
	nnz := *(*int64)(res)
	if nnz < int64(s.nnz) || nnz > int64(s.nnz)+int64(s.rows) {
		return fail(fmt.Errorf("cuda: %s: device counted %d entries for %d entries and %d rows", op, nnz, s.nnz, s.rows))
	}
	col, err := d.allocLocked(backend.Int32, int(nnz))
	if err != nil {
		return fail(err)
	}
	if err := d.launchN("self_loop_fill", int64(s.rows), uint64(col.ptr), uint64(ptr.ptr), uint64(s.ptr.ptr), uint64(s.col.ptr), cu.I64(int64(s.rows))); err != nil {
		d.freeLocked(col)
		return fail(err)
	}
	return &Sparse{dev: d, rows: s.rows, cols: s.cols, nnz: int(nnz), ptr: ptr, col: col}, nil
}

// GCNNorm writes out[e] = 1/sqrt(max(indeg(i),1) * max(outdeg(j),1)) for
// every edge e = (i, j) of a, in float64 like the host computation
// (nn.SparseDeriver). The column degrees come from a's transpose, built
// here if needed and kept for the transposed products of the backward
// pass.
func (d *Device) GCNNorm(out backend.Buffer, a backend.Sparse) error {
	const op = "GCNNorm"
	s, err := d.asSparse(op, a)
	if err != nil {
		return err
	}
	ov, err := d.f32(op, "out", out, s.nnz)
	if err != nil {
		return err
	}
	if s.nnz == 0 {
		return nil
	}
	return d.run(func() error {
		t, err := d.viewLocked(s, true)
		if err != nil {
			return err
		}
		return d.launchN("gcn_norm", int64(s.rows), uint64(ov.ptr), uint64(s.ptr.ptr), uint64(s.col.ptr), uint64(t.ptr), cu.I64(int64(s.rows)))
	})
}
