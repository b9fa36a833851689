package metis

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"
)

// MaxEntries is the largest adjacency length METIS (32-bit idx_t) accepts.
const MaxEntries = math.MaxInt32

// ErrUnavailable is wrapped by every error saying libmetis could not be
// loaded (missing, disabled, or an unsupported platform).
var ErrUnavailable = errors.New("metis: libmetis not available")

// ErrInput is wrapped by errors about the arguments (checked before any
// call into the library).
var ErrInput = errors.New("metis: invalid input")

// Return codes of METIS 5 (metis.h rstatus_et).
const (
	rcOK          = 1
	rcErrorInput  = -2
	rcErrorMemory = -3
	rcError       = -4
)

// Option indices in the options array (metis.h moptions_et) and its length.
const (
	optObjType   = 1
	optDbgLvl    = 5
	optSeed      = 8
	optUFactor   = 16
	optNumbering = 17
	numOptions   = 40
)

type library struct {
	path        string
	setDefaults func(options *int32) int32
	partKway    func(nvtxs, ncon, xadj, adjncy, vwgt, vsize, adjwgt, nparts *int32,
		tpwgts, ubvec *float32, options, objval, part *int32) int32
	partRecursive func(nvtxs, ncon, xadj, adjncy, vwgt, vsize, adjwgt, nparts *int32,
		tpwgts, ubvec *float32, options, objval, part *int32) int32
}

var (
	loadOnce sync.Once
	lib      *library
	loadErr  error
	// callMu serializes calls: METIS keeps no global state we rely on,
	// but its memory-cleanup and signal-trap code (gk_malloc_init,
	// gk_sigtrap) is not thread-safe.
	callMu sync.Mutex
)

// Load opens libmetis once and returns nil when it is usable. The error
// (wrapping ErrUnavailable) lists the files tried.
func Load() error {
	loadOnce.Do(func() { lib, loadErr = open() })
	return loadErr
}

// Path returns the file libmetis was loaded from ("" before a successful
// Load).
func Path() string {
	if Load() != nil {
		return ""
	}
	return lib.path
}

// Graph is the input of PartGraphKway in METIS's own layout: a symmetric
// graph without self-loops, neighbors of v in Adjncy[Xadj[v]:Xadj[v+1]].
type Graph struct {
	Xadj   []int32 // len n+1, Xadj[0] == 0, non-decreasing
	Adjncy []int32 // neighbor IDs in [0, n), no self-loops
	// NCon is the number of balance constraints (weights per vertex); 0
	// means 1 with unit weights (VWgt must then be nil).
	NCon int
	VWgt []int32 // nil or len n*NCon, non-negative
	// AdjWgt holds edge weights (nil = all 1), positive.
	AdjWgt []int32
}

// Options controls a call.
type Options struct {
	K int // number of parts, >= 1
	// UBVec is the allowed load imbalance per constraint (1.03 = 3%); nil
	// means 1.03 for every constraint (METIS's ufactor 30).
	UBVec []float32
	// Seed for METIS's random number generator.
	Seed int32
}

// Result is what METIS returned.
type Result struct {
	Parts []int32 // part of every vertex, in [0, K)
	Cut   int64   // edge cut as reported by METIS (each undirected edge once)
}

// Check validates g and opts as PartGraphKway would before calling the
// library; it returns an error wrapping ErrInput, or nil.
func Check(g *Graph, opts Options) error {
	if g == nil {
		return fmt.Errorf("%w: nil graph", ErrInput)
	}
	if len(g.Xadj) == 0 {
		return fmt.Errorf("%w: xadj is empty (want n+1 entries)", ErrInput)
	}
	if int64(len(g.Adjncy)) >= MaxEntries {
		return fmt.Errorf("%w: %d adjacency entries; METIS with 32-bit idx_t takes fewer than 2^31", ErrInput, len(g.Adjncy))
	}
	n := len(g.Xadj) - 1
	if g.Xadj[0] != 0 {
		return fmt.Errorf("%w: xadj[0] = %d, want 0", ErrInput, g.Xadj[0])
	}
	for v := 0; v < n; v++ {
		if g.Xadj[v+1] < g.Xadj[v] {
			return fmt.Errorf("%w: xadj[%d] = %d < xadj[%d] = %d", ErrInput, v+1, g.Xadj[v+1], v, g.Xadj[v])
		}
	}
	if int(g.Xadj[n]) != len(g.Adjncy) {
		return fmt.Errorf("%w: xadj[n] = %d, want len(adjncy) = %d", ErrInput, g.Xadj[n], len(g.Adjncy))
	}
	for v := 0; v < n; v++ {
		for e := g.Xadj[v]; e < g.Xadj[v+1]; e++ {
			u := g.Adjncy[e]
			if u < 0 || int(u) >= n {
				return fmt.Errorf("%w: adjncy[%d] = %d not in [0, %d)", ErrInput, e, u, n)
			}
			if int(u) == v {
				return fmt.Errorf("%w: self-loop at vertex %d (adjncy[%d])", ErrInput, v, e)
			}
		}
	}
	ncon := g.NCon
	if ncon < 0 || ncon > 64 {
		return fmt.Errorf("%w: ncon %d not in [0, 64]", ErrInput, ncon)
	}
	if ncon == 0 {
		if g.VWgt != nil {
			return fmt.Errorf("%w: vertex weights given with NCon = 0", ErrInput)
		}
		ncon = 1
	}
	if g.VWgt != nil {
		if len(g.VWgt) != n*ncon {
			return fmt.Errorf("%w: %d vertex weights, want n*ncon = %d", ErrInput, len(g.VWgt), n*ncon)
		}
		sums := make([]int64, ncon)
		for i, w := range g.VWgt {
			if w < 0 {
				return fmt.Errorf("%w: vwgt[%d] = %d is negative", ErrInput, i, w)
			}
			sums[i%ncon] += int64(w)
		}
		for c, s := range sums {
			if s > math.MaxInt32 {
				return fmt.Errorf("%w: total weight %d of constraint %d overflows idx_t", ErrInput, s, c)
			}
		}
	}
	if g.AdjWgt != nil {
		if len(g.AdjWgt) != len(g.Adjncy) {
			return fmt.Errorf("%w: %d edge weights, want %d", ErrInput, len(g.AdjWgt), len(g.Adjncy))
		}
		var s int64
		for i, w := range g.AdjWgt {
			if w <= 0 {
				return fmt.Errorf("%w: adjwgt[%d] = %d, want > 0", ErrInput, i, w)
			}
			s += int64(w)
		}
		if s > math.MaxInt32 {
			return fmt.Errorf("%w: total edge weight %d overflows idx_t", ErrInput, s)
		}
	}
	if opts.K < 1 || opts.K > math.MaxInt32 {
		return fmt.Errorf("%w: k = %d, want >= 1", ErrInput, opts.K)
	}
	if opts.UBVec != nil {
		if len(opts.UBVec) != ncon {
			return fmt.Errorf("%w: %d imbalance factors, want ncon = %d", ErrInput, len(opts.UBVec), ncon)
		}
		for c, u := range opts.UBVec {
			if !(u >= 1 && u <= 100) {
				return fmt.Errorf("%w: imbalance factor %v of constraint %d not in [1, 100]", ErrInput, u, c)
			}
		}
	}
	return nil
}

// PartGraphKway partitions g into opts.K parts with METIS's multilevel
// k-way method, minimizing the edge cut. It validates the input first
// (Check) and returns an error wrapping ErrUnavailable when libmetis cannot
// be loaded. Calls are serialized.
func PartGraphKway(g *Graph, opts Options) (*Result, error) {
	return part(g, opts, false)
}

// PartGraphRecursive is PartGraphKway with METIS's multilevel recursive
// bisection (METIS_PartGraphRecursive).
func PartGraphRecursive(g *Graph, opts Options) (*Result, error) {
	return part(g, opts, true)
}

func part(g *Graph, opts Options, recursive bool) (*Result, error) {
	if err := Check(g, opts); err != nil {
		return nil, err
	}
	n := len(g.Xadj) - 1
	if opts.K == 1 || n == 0 {
		// METIS 5.1 mishandles nparts = 1; the answer is trivial anyway.
		return &Result{Parts: make([]int32, n)}, nil
	}
	if err := Load(); err != nil {
		return nil, err
	}
	ncon := max(g.NCon, 1)
	ub := opts.UBVec
	if ub == nil {
		ub = make([]float32, ncon)
		for i := range ub {
			ub[i] = 1.03
		}
	}
	var options [numOptions]int32
	callMu.Lock()
	defer callMu.Unlock()
	if rc := lib.setDefaults(&options[0]); rc != rcOK {
		return nil, fmt.Errorf("metis: METIS_SetDefaultOptions returned %d", rc)
	}
	options[optSeed] = opts.Seed
	options[optNumbering] = 0
	if v, err := strconv.Atoi(os.Getenv("STRATA_METIS_DBGLVL")); err == nil {
		options[optDbgLvl] = int32(v)
	}
	nvtxs, ncon32, nparts := int32(n), int32(ncon), int32(opts.K)
	var objval int32
	parts := make([]int32, max(n, 1))
	adjncy := g.Adjncy
	if len(adjncy) == 0 {
		adjncy = []int32{0} // METIS reads no entry, but wants a valid pointer
	}
	fn := lib.partKway
	if recursive {
		fn = lib.partRecursive
	}
	rc := fn(&nvtxs, &ncon32, &g.Xadj[0], &adjncy[0], ptrOr(g.VWgt), nil, ptrOr(g.AdjWgt), &nparts,
		nil, &ub[0], &options[0], &objval, &parts[0])
	runtime.KeepAlive(g)
	runtime.KeepAlive(adjncy)
	runtime.KeepAlive(ub)
	switch rc {
	case rcOK:
	case rcErrorInput:
		return nil, fmt.Errorf("%w: METIS rejected the input (METIS_ERROR_INPUT)", ErrInput)
	case rcErrorMemory:
		return nil, errors.New("metis: METIS ran out of memory (METIS_ERROR_MEMORY)")
	default:
		return nil, fmt.Errorf("metis: METIS failed with code %d", rc)
	}
	parts = parts[:n]
	for v, p := range parts {
		if p < 0 || int(p) >= opts.K {
			return nil, fmt.Errorf("metis: library returned part %d for vertex %d, want [0, %d)", p, v, opts.K)
		}
	}
	return &Result{Parts: parts, Cut: int64(objval)}, nil
}

func ptrOr(s []int32) *int32 {
	if len(s) == 0 {
		return nil
	}
	return (*int32)(unsafe.Pointer(&s[0]))
}
