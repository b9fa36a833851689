package cublas

import (
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
)

// Pinned runs row-major products through cuBLASLt with algorithms pinned
// per shape family, so that a product never uses a kernel for the first
// time after its family was first seen (see the package doc, # Pinned
// algorithms). It is bound to the context current at NewPinned and, like
// Handle, not safe for concurrent use; keep one per stream.
type Pinned struct {
	h       uintptr // cublasLtHandle_t
	pref    uintptr // cublasLtMatmulPreference_t
	scratch uintptr // PinnedScratchBytes of device memory for warm launches
	ops     map[opKey]*ltOp
	keys    map[Key]*pinnedAlgo
	// centers are the keys whose family was warmed; warming makes every
	// product's key one (SetWarming).
	centers map[Key]bool
	warming bool
	stats   PinnedStats
	// OnFamily, when set, is told each family's center as it is warmed
	// and whether warming was on (a diagnostic).
	OnFamily func(center Key, warming bool)

	// Values whose addresses the Lt calls read or write, kept here (the
	// Pinned is on the heap) rather than in a Go value per call.
	alpha, beta float32
	u64         uint64
	u32         uint32
	i32         int32
	res         ltHeuristic
	nres        int32
}

// PinnedStats counts what a Pinned did.
type PinnedStats struct {
	// Families is the number of family warm-ups: products whose key no
	// earlier family covered, and with SetWarming each new center.
	Families int
	// Keys is the number of keys warmed: one heuristic query each, at
	// the key's representative shape.
	Keys int
	// NoAlgorithm counts keys the heuristic had no algorithm for (their
	// products run the heuristic at their own shape).
	NoAlgorithm int
	// WarmLaunches counts algorithms launched once on the scratch
	// matrices when their family was warmed.
	WarmLaunches int
	// WarmSkipped counts keys whose algorithm was not launched while
	// warming: cublasLtMatmulAlgoCheck refused it at the warm shape, or
	// the launch was refused.
	WarmSkipped int
	// Calls is the number of products run.
	Calls int
	// Fallbacks counts products that did not run their key's algorithm
	// (cublasLtMatmulAlgoCheck refused it at their shape, or the key had
	// none): they ran the heuristic's choice for their own shape, which may
	// be a kernel's first use.
	Fallbacks int
}

// ErrNoAlgorithm is returned (wrapped) by Pinned.Gemm when cuBLASLt has
// no algorithm for a product; the caller can run it through cublasGemmEx.
var ErrNoAlgorithm = errors.New("cublas: cuBLASLt has no algorithm for the product")

// GemmRequest is one product for Pinned.Gemm: C = alpha*op(A)*op(B) +
// beta*C with row-major matrices, as Handle.Gemm (C is m x n, op(A)
// m x k, op(B) k x n; A stored k x m when TransA, B n x k when TransB),
// written in place (D = C). The scale type (alpha, beta) is float32.
type GemmRequest struct {
	Compute        ComputeType
	AB             DataType // A and B: R32F or R16BF
	C              DataType // C: R32F, or R16BF with R16BF A and B
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	A, B, CPtr     uintptr // device pointers
	Stream         uintptr // CUstream
	Workspace      uintptr // device memory, 256-byte aligned
	WorkspaceBytes int
}

// Size buckets and families.
const (
	// FamilyBuckets is the number of buckets of one dimension that a
	// family covers: 2^0 .. 2^(FamilyBuckets-1).
	FamilyBuckets = 25
	// FamilySize is the number of keys in the family of a key whose three
	// buckets are at most 2^(FamilyBuckets-1): three lines of
	// FamilyBuckets keys through that key, which they share.
	FamilySize = 3*FamilyBuckets - 2
	// warmMax bounds each dimension of a warm launch.
	warmMax = 1024
	// maxRepLog caps a representative dimension at 2^30 (int32 dims).
	maxRepLog = 30
)

// PinnedScratchBytes is the device memory NewPinned needs for its warm
// launches: three warmMax x warmMax float32 matrices.
const PinnedScratchBytes = 3 * warmMatrixBytes

const warmMatrixBytes = warmMax * warmMax * 4

// Key selects a pinned algorithm: the product's types and transposes,
// the size bucket of each dimension (log2 of the power of two >= it) and
// the alignment class of each matrix (AlignClass of its pointer and
// leading dimension in bytes).
type Key struct {
	Compute                ComputeType
	AB, C                  DataType
	TransA, TransB         bool
	LogM, LogN, LogK       uint8
	AlignA, AlignB, AlignC uint8
}

func (k Key) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("compute %d types %d/%d %s%s m2^%d n2^%d k2^%d align %d/%d/%d",
		k.Compute, k.AB, k.C, t(k.TransA), t(k.TransB), k.LogM, k.LogN, k.LogK, k.AlignA, k.AlignB, k.AlignC)
}

// Bucket returns the power of two >= x (1 for x <= 1).
func Bucket(x int) int { return 1 << bucketLog(x) }

func bucketLog(x int) uint8 {
	if x <= 1 {
		return 0
	}
	return uint8(bits.Len(uint(x - 1)))
}

// AlignClass returns the largest of 16, 8, 4 and 2 bytes that divides
// both ptr and ldBytes (1 when none does).
func AlignClass(ptr uintptr, ldBytes int) int {
	for _, c := range [...]int{16, 8, 4, 2} {
		if ptr%uintptr(c) == 0 && ldBytes%c == 0 {
			return c
		}
	}
	return 1
}

func (t DataType) size() int {
	if t == R16BF {
		return 2
	}
	return 4
}

// lds returns the leading dimensions (in elements) of row-major A, B
// and C: A is m x k (k x m when transA), B k x n (n x k when transB).
func lds(transA, transB bool, m, n, k int) (lda, ldb, ldc int) {
	lda, ldb = k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	return lda, ldb, n
}

// Key returns the request's key.
func (r *GemmRequest) Key() Key {
	lda, ldb, ldc := lds(r.TransA, r.TransB, r.M, r.N, r.K)
	ab, c := r.AB.size(), r.C.size()
	return Key{
		Compute: r.Compute, AB: r.AB, C: r.C, TransA: r.TransA, TransB: r.TransB,
		LogM: bucketLog(r.M), LogN: bucketLog(r.N), LogK: bucketLog(r.K),
		AlignA: uint8(AlignClass(r.A, lda*ab)),
		AlignB: uint8(AlignClass(r.B, ldb*ab)),
		AlignC: uint8(AlignClass(r.CPtr, ldc*c)),
	}
}

// Family returns the keys warmed when k is first seen, k first: for
// each dimension, every bucket 2^0 .. 2^(FamilyBuckets-1) of it with the
// other two at k's buckets (FamilySize keys when k's buckets are within
// that range). Keys no product can have are left in; Pinned skips them
// (reachable).
func (k Key) Family() []Key {
	out := make([]Key, 1, FamilySize+1)
	out[0] = k
	for d := range 3 {
		for e := range uint8(FamilyBuckets) {
			x := k
			*x.log(d) = e
			if x != k {
				out = append(out, x)
			}
		}
	}
	return out
}

func (k *Key) log(d int) *uint8 {
	switch d {
	case 0:
		return &k.LogM
	case 1:
		return &k.LogN
	}
	return &k.LogK
}

// rep returns the key's representative shape: each bucket's power of
// two (at most 2^30).
func (k Key) rep() (m, n, kk int) {
	r := func(e uint8) int { return 1 << min(e, maxRepLog) }
	return r(k.LogM), r(k.LogN), r(k.LogK)
}

// reachable reports whether some product has key k: each matrix's packed
// leading dimension at the representative shape, in bytes, is a multiple
// of its alignment class (a smaller one in the bucket never is when the
// largest is not: all are powers of two).
func (k Key) reachable() bool {
	m, n, kk := k.rep()
	lda, ldb, ldc := lds(k.TransA, k.TransB, m, n, kk)
	ab, c := k.AB.size(), k.C.size()
	return (lda*ab)%int(k.AlignA) == 0 && (ldb*ab)%int(k.AlignB) == 0 && (ldc*c)%int(k.AlignC) == 0
}

// warmShape returns the shape a key's algorithm is launched at once:
// its representative shape, each dimension at most warmMax.
func (k Key) warmShape() (m, n, kk int) {
	m, n, kk = k.rep()
	return min(m, warmMax), min(n, warmMax), min(kk, warmMax)
}

// ltDims returns the column-major layouts (rows, cols, ld) of cuBLASLt's
// A, B and C for a row-major product, computed as C^T = op(B)^T op(A)^T:
// Lt's A is our B, Lt's B our A (the operands swapped, as in Gemm), and
// C (n x m column-major) is written in place.
func ltDims(transA, transB bool, m, n, k int) [3][3]uint64 {
	u := func(x int) uint64 { return uint64(x) }
	var d [3][3]uint64
	if transB { // B stored n x k row-major: column-major k x n, op T
		d[0] = [3]uint64{u(k), u(n), u(k)}
	} else { // B stored k x n: column-major n x k
		d[0] = [3]uint64{u(n), u(k), u(n)}
	}
	if transA { // A stored k x m: column-major m x k, op T
		d[1] = [3]uint64{u(m), u(k), u(m)}
	} else { // A stored m x k: column-major k x m
		d[1] = [3]uint64{u(k), u(m), u(k)}
	}
	d[2] = [3]uint64{u(n), u(m), u(n)}
	return d
}

// opKey selects the descriptors of a product: its matmul descriptor
// (compute type, transposes) and its three layouts (types).
type opKey struct {
	ct             ComputeType
	ab, c          DataType
	transA, transB bool
}

// ltOp is one matmul descriptor and its layouts, whose dimensions are
// updated per call (only those that changed).
type ltOp struct {
	desc uintptr
	lay  [3]uintptr   // Lt A (our B), Lt B (our A), C and D
	dims [3][3]uint64 // rows, cols, ld now set on each layout
}

// pinnedAlgo is a key's algorithm.
type pinnedAlgo struct {
	algo ltAlgo
	ok   bool // the heuristic gave one
	// The shape and workspace size at which AlgoCheck last accepted it:
	// the same product again skips the check.
	passM, passN, passK, passWS int
}

// NewPinned makes a Pinned in the current context (call on a thread
// where it is current). scratch must be PinnedScratchBytes (or more) of
// device memory, 256-byte aligned, that outlives the Pinned and that
// nothing else writes while its products are queued: warm launches read
// and write it (its contents do not matter). It fails when cuBLASLt
// cannot be loaded (LoadLt).
func NewPinned(scratch uintptr, scratchBytes int) (*Pinned, error) {
	if err := LoadLt(); err != nil {
		return nil, err
	}
	if scratch == 0 || scratchBytes < PinnedScratchBytes {
		return nil, fmt.Errorf("cublas: NewPinned: scratch of %d bytes at %#x, want %d", scratchBytes, scratch, PinnedScratchBytes)
	}
	p := &Pinned{scratch: scratch, ops: map[opKey]*ltOp{}, keys: map[Key]*pinnedAlgo{}, centers: map[Key]bool{}}
	if err := check("cublasLtCreate", call(lt.create, uintptr(unsafe.Pointer(&p.h)))); err != nil {
		return nil, err
	}
	if err := check("cublasLtMatmulPreferenceCreate", call(lt.prefCreate, uintptr(unsafe.Pointer(&p.pref)))); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases the descriptors and the cuBLASLt handle.
func (p *Pinned) Close() error {
	if p == nil || lt == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, o := range p.ops {
		for _, l := range o.lay {
			if l != 0 {
				keep(check("cublasLtMatrixLayoutDestroy", call(lt.layoutDestroy, l)))
			}
		}
		if o.desc != 0 {
			keep(check("cublasLtMatmulDescDestroy", call(lt.descDestroy, o.desc)))
		}
	}
	p.ops = nil
	if p.pref != 0 {
		keep(check("cublasLtMatmulPreferenceDestroy", call(lt.prefDestroy, p.pref)))
		p.pref = 0
	}
	if p.h != 0 {
		keep(check("cublasLtDestroy", call(lt.destroy, p.h)))
		p.h = 0
	}
	return first
}

// SetWarming turns warming on or off. While on, every product warms its
// key's family unless that key was a family's center already: a key that
// only lies in another family (one bucket apart from its center) gets the
// lines through it too. A caller runs one product of each form it will
// run (any size) with warming on, before work that must not meet a
// kernel for the first time: then a later product that differs from one
// of them in one dimension's bucket (a batch's row count) is covered.
// Off (the default), only a key outside every family warms one.
func (p *Pinned) SetWarming(on bool) { p.warming = on }

// Stats returns the counters.
func (p *Pinned) Stats() PinnedStats { return p.stats }

// Gemm queues the product r on r.Stream. The first product of a key no
// earlier family covered warms that key's family (Key.Family): for each
// key, one heuristic query at its representative shape and one launch of
// the chosen algorithm on the scratch matrices, on r.Stream with r's
// workspace. A product then runs its key's algorithm when
// cublasLtMatmulAlgoCheck accepts it at the product's shape (a host-only
// check), else the heuristic's choice for its own shape (a fallback,
// counted). It returns an error wrapping ErrNoAlgorithm when cuBLASLt
// has no algorithm at all.
func (p *Pinned) Gemm(r *GemmRequest) error {
	const maxI32 = 1<<31 - 1
	if r.M < 1 || r.N < 1 || r.K < 1 || r.M > maxI32 || r.N > maxI32 || r.K > maxI32 {
		return fmt.Errorf("cublas: Pinned.Gemm: dimensions m=%d n=%d k=%d must be in [1, 2^31)", r.M, r.N, r.K)
	}
	if (r.AB != R32F && r.AB != R16BF) || (r.C != R32F && r.C != R16BF) || (r.C == R16BF && r.AB != R16BF) {
		return fmt.Errorf("cublas: Pinned.Gemm: types A/B %d, C %d: want R32F or R16BF, and an R16BF C only with R16BF A and B", r.AB, r.C)
	}
	if r.WorkspaceBytes < 0 {
		return fmt.Errorf("cublas: Pinned.Gemm: workspace of %d bytes", r.WorkspaceBytes)
	}
	key := r.Key()
	op, err := p.op(opKey{ct: r.Compute, ab: r.AB, c: r.C, transA: r.TransA, transB: r.TransB})
	if err != nil {
		return err
	}
	e := p.keys[key]
	if e == nil || (p.warming && !p.centers[key]) {
		if err := p.warmFamily(key, op, r); err != nil {
			return err
		}
		e = p.keys[key]
	}
	p.stats.Calls++
	if err := p.setDims(op, r.TransA, r.TransB, r.M, r.N, r.K); err != nil {
		return err
	}
	if e != nil && e.ok {
		if e.passM == r.M && e.passN == r.N && e.passK == r.K && e.passWS == r.WorkspaceBytes {
			return p.matmul(op, r.A, r.B, r.CPtr, r.Alpha, r.Beta, &e.algo, r.Workspace, r.WorkspaceBytes, r.Stream)
		}
		if p.algoCheck(op, &e.algo, r.WorkspaceBytes) {
			e.passM, e.passN, e.passK, e.passWS = r.M, r.N, r.K, r.WorkspaceBytes
			return p.matmul(op, r.A, r.B, r.CPtr, r.Alpha, r.Beta, &e.algo, r.Workspace, r.WorkspaceBytes, r.Stream)
		}
	}
	p.stats.Fallbacks++
	if err := p.setPref(key, r.WorkspaceBytes); err != nil {
		return err
	}
	if ok, st := p.heuristic(op); !ok {
		return fmt.Errorf("%w (%s; m=%d n=%d k=%d): %w", ErrNoAlgorithm, key, r.M, r.N, r.K, check("cublasLtMatmulAlgoGetHeuristic", st))
	}
	return p.matmul(op, r.A, r.B, r.CPtr, r.Alpha, r.Beta, &p.res.algo, r.Workspace, r.WorkspaceBytes, r.Stream)
}

// warmFamily chooses and launches once the algorithm of every key of
// center's family not seen yet.
func (p *Pinned) warmFamily(center Key, op *ltOp, r *GemmRequest) error {
	p.stats.Families++
	p.centers[center] = true
	if p.OnFamily != nil {
		p.OnFamily(center, p.warming)
	}
	if err := p.setPref(center, r.WorkspaceBytes); err != nil {
		return err
	}
	// Scratch A, B and C, each room for a warmMax x warmMax float32 matrix.
	sa, sb, sc := p.scratch, p.scratch+warmMatrixBytes, p.scratch+2*warmMatrixBytes
	for _, k := range center.Family() {
		if _, seen := p.keys[k]; seen || !k.reachable() {
			continue
		}
		e := &pinnedAlgo{}
		p.keys[k] = e
		p.stats.Keys++
		m, n, kk := k.rep()
		if err := p.setDims(op, k.TransA, k.TransB, m, n, kk); err != nil {
			return err
		}
		if ok, _ := p.heuristic(op); !ok {
			p.stats.NoAlgorithm++ // its products will ask at their own shape
			continue
		}
		e.algo, e.ok = p.res.algo, true
		m, n, kk = k.warmShape()
		if err := p.setDims(op, k.TransA, k.TransB, m, n, kk); err != nil {
			return err
		}
		if !p.algoCheck(op, &e.algo, r.WorkspaceBytes) {
			p.stats.WarmSkipped++
			continue
		}
		err := p.matmul(op, sa, sb, sc, 1, 0, &e.algo, r.Workspace, r.WorkspaceBytes, r.Stream)
		var ce *Error
		switch {
		case err == nil:
			p.stats.WarmLaunches++
		case errors.As(err, &ce) && (ce.Status == 7 || ce.Status == 8 || ce.Status == 15):
			// INVALID_VALUE, ARCH_MISMATCH, NOT_SUPPORTED: the check
			// passed but the launch was refused; products of this key
			// will check again and fall back.
			p.stats.WarmSkipped++
		default:
			return fmt.Errorf("warming %s: %w", k, err)
		}
	}
	return nil
}

// op returns the descriptors of o, creating them on first use.
func (p *Pinned) op(o opKey) (*ltOp, error) {
	if x := p.ops[o]; x != nil {
		return x, nil
	}
	x := &ltOp{}
	if err := check("cublasLtMatmulDescCreate", call(lt.descCreate, uintptr(unsafe.Pointer(&x.desc)), uintptr(o.ct), uintptr(R32F))); err != nil {
		return nil, err
	}
	destroy := func() {
		for _, l := range x.lay {
			if l != 0 {
				call(lt.layoutDestroy, l)
			}
		}
		call(lt.descDestroy, x.desc)
	}
	// Lt's A is our B, its B our A (C^T = op(B)^T op(A)^T).
	p.i32 = opN
	if o.transB {
		p.i32 = opT
	}
	if err := ltSetDesc(x.desc, ltDescTransA, unsafe.Pointer(&p.i32), 4); err != nil {
		destroy()
		return nil, err
	}
	p.i32 = opN
	if o.transA {
		p.i32 = opT
	}
	if err := ltSetDesc(x.desc, ltDescTransB, unsafe.Pointer(&p.i32), 4); err != nil {
		destroy()
		return nil, err
	}
	for i, t := range [3]DataType{o.ab, o.ab, o.c} {
		if err := check("cublasLtMatrixLayoutCreate", call(lt.layoutCreate, uintptr(unsafe.Pointer(&x.lay[i])), uintptr(t), 1, 1, 1)); err != nil {
			destroy()
			return nil, err
		}
		x.dims[i] = [3]uint64{1, 1, 1}
	}
	p.ops[o] = x
	return x, nil
}

// setDims sets the layouts of o to the product's shape, calling
// cublasLtMatrixLayoutSetAttribute only for values that changed.
func (p *Pinned) setDims(o *ltOp, transA, transB bool, m, n, k int) error {
	want := ltDims(transA, transB, m, n, k)
	for i := range want {
		for j, attr := range [3]int{ltLayoutRows, ltLayoutCols, ltLayoutLD} {
			if o.dims[i][j] == want[i][j] {
				continue
			}
			p.u64 = want[i][j]
			if err := ltSetLayout(o.lay[i], attr, unsafe.Pointer(&p.u64), 8); err != nil {
				o.dims[i][j] = 0 // unknown now
				return err
			}
			o.dims[i][j] = want[i][j]
		}
	}
	return nil
}

// setPref sets the preference's workspace limit and the key's alignment
// classes (Lt's A is our B).
func (p *Pinned) setPref(k Key, workspaceBytes int) error {
	p.u64 = uint64(workspaceBytes)
	if err := ltSetPref(p.pref, ltPrefMaxWorkspaceBytes, unsafe.Pointer(&p.u64), 8); err != nil {
		return err
	}
	for _, a := range [...]struct {
		attr  int
		bytes uint8
	}{{ltPrefMinAlignA, k.AlignB}, {ltPrefMinAlignB, k.AlignA}, {ltPrefMinAlignC, k.AlignC}, {ltPrefMinAlignD, k.AlignC}} {
		p.u32 = uint32(a.bytes)
		if err := ltSetPref(p.pref, a.attr, unsafe.Pointer(&p.u32), 4); err != nil {
			return err
		}
	}
	return nil
}

// heuristic asks for the best algorithm at o's current shape under the
// preference (p.res holds it). It returns the call's status when it has
// none: CUBLAS_STATUS_NOT_SUPPORTED when no heuristic covers the
// configuration, or another status (INVALID_VALUE for a shape the
// library refuses, say).
func (p *Pinned) heuristic(o *ltOp) (ok bool, status uintptr) {
	p.nres = 0
	st := call(lt.getHeuristic, p.h, o.desc, o.lay[0], o.lay[1], o.lay[2], o.lay[2], p.pref, 1,
		uintptr(unsafe.Pointer(&p.res)), uintptr(unsafe.Pointer(&p.nres)))
	if st == 0 && (p.nres < 1 || p.res.state != 0) {
		st = 15 // CUBLAS_STATUS_NOT_SUPPORTED: no algorithm returned
	}
	return st == 0, st
}

// algoCheck reports whether algo runs at o's current shape within
// workspaceBytes (cublasLtMatmulAlgoCheck: host only, launches nothing).
func (p *Pinned) algoCheck(o *ltOp, algo *ltAlgo, workspaceBytes int) bool {
	st := call(lt.algoCheck, p.h, o.desc, o.lay[0], o.lay[1], o.lay[2], o.lay[2],
		uintptr(unsafe.Pointer(algo)), uintptr(unsafe.Pointer(&p.res)))
	return st == 0 && p.res.workspaceSize <= uint64(workspaceBytes)
}

// matmul queues D = C = alpha*op(A)*op(B) + beta*C (row-major; a, b and c
// are our A, B and C) with algo.
func (p *Pinned) matmul(o *ltOp, a, b, c uintptr, alpha, beta float32, algo *ltAlgo, ws uintptr, wsBytes int, stream uintptr) error {
	p.alpha, p.beta = alpha, beta
	r := call(lt.matmul, p.h, o.desc, uintptr(unsafe.Pointer(&p.alpha)),
		b, o.lay[0], a, o.lay[1], uintptr(unsafe.Pointer(&p.beta)),
		c, o.lay[2], c, o.lay[2], uintptr(unsafe.Pointer(algo)), ws, uintptr(wsBytes), stream)
	return check("cublasLtMatmul", r)
}
