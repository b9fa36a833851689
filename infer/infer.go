package infer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Budgets of a chunk on a device, in bytes (Options.Budget).
const (
	// DefaultBudget is the budget on back ends that do not report
	// their memory (the CPU).
	DefaultBudget = 512 << 20
	// MaxAutoBudget caps the budget taken from a device's free memory
	// (a quarter of it).
	MaxAutoBudget = 4 << 30
	// MinBudget is the smallest budget accepted: below it a chunk would
	// hold a handful of nodes and the launches would dominate.
	MinBudget = 1 << 20
)

// DefaultStallTimeout is how long Run waits for a device that finishes
// no chunk before it gives up naming it.
const DefaultStallTimeout = 10 * time.Minute

// Input is the feature matrix the first layer reads (Rows x Cols): dense
// row-major, or sparse (Sparse non-nil), prepared as the model was trained
// (row normalization).
type Input struct {
	Rows, Cols int
	Dense      []float32
	Sparse     *autograd.HostSparse
}

// Request says what to compute.
type Request struct {
	// Layer is the layer (1-based) whose output is wanted: the hidden
	// representation after the activation for a hidden layer, the
	// logits for the last. 0 means the last.
	Layer int
	// Nodes are the rows wanted, in order (repeats allowed); nil means
	// every node in ID order.
	Nodes []int32
}

// Options are where and how Run computes; none changes the numbers on
// the CPU back end.
type Options struct {
	// Backends are the devices, one goroutine each; Models[i] is the
	// model on Backends[i] (NewModels builds them), all with the same
	// parameters.
	Backends []backend.Backend
	Models   []nn.Model
	// Budget is the memory in bytes a chunk may take on a device; 0
	// picks one: a quarter of the device's free memory, at most
	// MaxAutoBudget, on back ends that report it (backend.Memory), else
	// DefaultBudget.
	Budget int64
	// Offsets split the node IDs over the devices: device i computes
	// [Offsets[i], Offsets[i+1]); nil gives equal ranges.
	Offsets []int64
	// StallTimeout bounds the wait for a device that finishes no chunk
	// (0: DefaultStallTimeout).
	StallTimeout time.Duration
	// Progress, when set, describes a progress bar (with ETA) over the
	// chunks of every layer.
	Progress string
	// Placement says where a layer's input matrix is read from:
	// PlaceAuto keeps it in device memory on back ends with memory of
	// their own (backend.Memory) when it takes at most half of what is
	// free, else host memory; PlaceHost and PlaceDevice force one (a
	// device that cannot hold it falls back to the host).
	Placement Placement
	// Keep, when set, keeps what this Run uploads for the next Run of the
	// same work (see Keep) and hands over what an earlier one kept;
	// the caller frees it (Keep.Free) when no Run follows.
	Keep *Keep
	// Inputs, when set (one entry per back end), are layer 1's input
	// already in device memory: Inputs[d], a buffer of Backends[d],
	// float32, Rows x Cols in node order, holding the dense features'
	// values (Input.Dense) exactly. Device d gathers its chunks' source
	// rows from it instead of uploading the features (a feature cache
	// that holds the whole table: at papers100M's size the features
	// would not fit a second time). The caller owns them: Run and Keep
	// never free or keep them. A nil entry uploads as without Inputs;
	// PlaceHost gathers on the host all the same.
	Inputs []backend.Buffer
	// InputShards, when set, is layer 1's input spread over the
	// devices, each holding some nodes' rows (a feature cache
	// partitioned over the devices, every row cached by one of them):
	// layer 1 fetches its chunks' source rows from the devices that hold
	// them by the resident layers' exchange, as if the features were a
	// resident layer, so neither a replicated table nor a host gather is
	// needed. It takes precedence over Inputs. Dense features only.
	InputShards *Shards
	// Workers is the goroutines a device's host work (building the
	// chunks' blocks, routing their sources) may take; 0 is
	// GOMAXPROCS / the number of devices. The output does not depend
	// on it.
	Workers int
	// HotBytes is the device memory a device that gathers a layer's
	// input on the host may give a copy of the input's most-read rows
	// (the nodes of highest in-degree), so that its chunks upload only
	// the others: 0 picks what its free memory leaves beside two chunk
	// budgets and 1 GiB, on back ends that report their memory
	// (backend.Memory); negative keeps none. A positive value also lets
	// back ends that do not report their memory (the CPU) keep one. The
	// output does not depend on it.
	HotBytes int64
	// Resident says whether hidden layers' outputs stay in device
	// memory, each device holding its range's rows, the next layer
	// gathering its sources from the devices that hold them
	// (ResidentAuto: where the devices report memory and it fits).
	Resident Residency
	// ResidentBytes, when positive, caps what a device may give one
	// layer's output; a layer whose range on some device needs more goes
	// to host memory. It also lets back ends that do not report their
	// memory (the CPU) keep layers under ResidentAuto.
	ResidentBytes int64
	// Exchange, when set, are the device communicators (rank d on
	// Backends[d], of len(Backends)) over which resident layers' rows
	// move between devices; the caller owns them. Without them, Run opens
	// its own when a layer stays resident on several devices
	// (in-process between CPU back ends, NCCL between GPUs), kept by
	// Options.Keep across Runs.
	Exchange []comm.Comm
	// Log, when set, receives one line per layer: where its input was
	// read and its output went, with the bytes per device.
	Log io.Writer
	// ProfileOps times every op each device queues during each layer
	// (back ends with backend.Profiler: CUDA) and logs the layer's
	// largest ops per device and the host time of each phase of a
	// chunk; the run is slower. Without Log it only fills
	// LayerStats.Ops.
	ProfileOps bool
	// SyncOutputs waits for each chunk's output rows to reach host
	// memory before the device takes the next chunk. By default, on back
	// ends with backend.AsyncDownload, Fences and PinnedMemory (CUDA),
	// the rows go into one of two pinned slots on the device's queue and
	// a goroutine writes them into the output once its fence is reached,
	// while the device computes the next chunks (papers100M's layer 2 to
	// the host on 4 H100: 32.1 s waited, 16.1 s not). The output is the
	// same, bit for bit.
	SyncOutputs bool
}

// Shards is layer 1's input held by the devices (Options.InputShards):
// device d holds Rows[d] rows of the dense features in Tables[d], a
// float32 buffer of Backends[d] of Rows[d] x Cols values, each row
// exactly the features' row of its node. The caller owns the buffers.
type Shards struct {
	Tables []backend.Buffer
	Rows   []int
	// Holder returns the device holding node v's row and the row in its
	// table; every node must be held by one. nil means by range: device
	// d holds the rows of its range of Options.Offsets, in node order
	// (Rows[d] = Offsets[d+1] - Offsets[d]). It is called from several
	// goroutines at once.
	Holder func(v int32) (dev int, row int32)
}

// Placement is where a layer's input rows are gathered (Options.Placement).
type Placement int

// Placements.
const (
	PlaceAuto Placement = iota
	// PlaceHost gathers each chunk's source rows on the host and uploads
	// them.
	PlaceHost
	// PlaceDevice uploads the whole input matrix to every device once
	// per layer and gathers there (backend GatherRows).
	PlaceDevice
)

// Result is the requested output on the host.
type Result struct {
	Rows, Cols int
	// Data is Rows x Cols, row-major: row i is Request.Nodes[i] (node i
	// without Nodes).
	Data []float32
	// Layers reports every layer run.
	Layers []LayerStats

	unmap func() // Release's
}

// Release frees Data now when Run mapped it outside Go's heap (on Linux,
// the output of a Request without Nodes from 256 MiB: Go's allocator
// would zero it on one core, a minute at papers100M's size); Data must
// not be used after. Without Release such an output stays mapped until
// the process ends; with Go memory (every other output) Release only
// drops Data. Safe to call more than once.
func (res *Result) Release() {
	if res.unmap != nil {
		res.unmap()
	}
	res.Data, res.unmap = nil, nil
}

// LayerStats describes one layer of a run.
type LayerStats struct {
	Layer   int     `json:"layer"` // 1-based
	Nodes   int64   `json:"nodes"` // destination nodes computed
	Chunks  int     `json:"chunks"`
	Seconds float64 `json:"seconds"`
	// Input is where the layer's input rows were read: "host" (gathered
	// on the host, uploaded per chunk), "device" (the whole matrix on
	// every device), "resident" (the layer below's output, each
	// device holding its range, exchanged between them) or "shards"
	// (layer 1's, from Options.InputShards by the same exchange).
	Input string `json:"input"`
	// Output is where its output went: "host" or "resident"; Why says
	// why a hidden layer went to the host.
	Output string `json:"output"`
	Why    string `json:"why,omitempty"`
	// ResidentBytes is the largest device's share of a resident output.
	ResidentBytes int64 `json:"resident_bytes,omitempty"`
	// HotRows is the rows of an input gathered on the host that each
	// such device kept a copy of (its most-read rows, Options.HotBytes);
	// HotReads of the chunks' Reads source rows were read from it.
	HotRows  int64 `json:"hot_rows,omitempty"`
	HotReads int64 `json:"hot_reads,omitempty"`
	Reads    int64 `json:"reads,omitempty"`
	// BuildSeconds is the host time the slowest device spent making
	// its chunks' blocks and routes (ahead of the chunks it computed);
	// BuildWaitSeconds the longest a device waited for them: the part
	// of the building not hidden behind the computing.
	BuildSeconds     float64 `json:"build_seconds"`
	BuildWaitSeconds float64 `json:"build_wait_seconds"`
	// Phases is the host time the slowest device spent in each phase of
	// its chunks: "block" (the block's upload), "input" (the source rows:
	// the exchange, a gather or an upload), "lockstep" (a resident
	// input's round header, where the devices wait for each other),
	// "forward" (queuing the layer), "output" (writing the rows) and
	// "free" (the chunk's device buffers freed). Work queued on a device
	// is counted where the host next waits for it.
	Phases map[string]float64 `json:"phases,omitempty"`
	// SetupSeconds is the layer's time before its devices started (the
	// output's placement, AllocSeconds of it allocating the host
	// output; the input's placement), FinishSeconds after the last
	// device returned (op profiles, freeing the placed input); Devices
	// accounts for each device's part of the rest.
	SetupSeconds  float64      `json:"setup_seconds"`
	AllocSeconds  float64      `json:"alloc_seconds"`
	FinishSeconds float64      `json:"finish_seconds"`
	Devices       []DeviceTime `json:"devices,omitempty"`
	// Ops, with Options.ProfileOps, is each device's device time per op
	// over the layer, largest first (nil where the back end has no
	// profiler).
	Ops [][]backend.OpTime `json:"ops,omitempty"`
}

// Error reports a request or an input that cannot run, or a failure
// while running, with where it happened.
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return "infer: " + e.Op + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errf(op, format string, args ...any) error {
	return &Error{Op: op, Err: fmt.Errorf(format, args...)}
}

// NewModels builds cfg's model on every back end and loads params into
// each (nn.LoadParams). free releases them.
func NewModels(bs []backend.Backend, cfg nn.Config, params []nn.NamedTensor) (models []nn.Model, free func(), err error) {
	free = func() {
		for i, m := range models {
			nn.FreeParams(bs[i], m.Params())
		}
	}
	for _, b := range bs {
		m, err := nn.New(b, cfg)
		if err != nil {
			free()
			return nil, func() {}, &Error{Op: "model on " + b.Name(), Err: err}
		}
		models = append(models, m)
		if err := nn.LoadParams(b, m.Params(), params); err != nil {
			free()
			return nil, func() {}, &Error{Op: "parameters on " + b.Name(), Err: err}
		}
	}
	return models, free, nil
}

// Run computes req over the graph whose in-adjacency is in (row v lists
// the sources of v's incoming edges; square, valid) from the features x.
func Run(ctx context.Context, in *graph.CSR, x *Input, req Request, opts Options) (*Result, error) {
	t0 := time.Now()
	r, err := newRun(in, x, req, opts)
	if err != nil {
		return nil, err
	}
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "inference setup %.2f s (the nodes each layer computes, chunk budgets)\n", time.Since(t0).Seconds())
	}
	res, err := r.run(ctx)
	r.closeExchange(err != nil)
	r.free()
	return res, err
}

// stall is the stall timeout in force.
func (r *run) stall() time.Duration {
	if r.opts.StallTimeout > 0 {
		return r.opts.StallTimeout
	}
	return DefaultStallTimeout
}

// run is one Run's state.
type run struct {
	in      *graph.CSR
	x       *Input
	opts    Options
	req     Request
	layers  []nn.Layered
	cfg     nn.Config
	n       int
	last    int       // 0-based index of the requested layer
	need    [][]int32 // per layer, the sorted nodes computed; nil: all
	gcnDeg  []int64   // GCN: out-degrees of the whole self-loop graph
	budgets []int64
	hosts   []hostMatrix // per layer up to last, its output
	scratch [][]*scratch // per device, a scratch per builder
	bar     *progress.Bar
	res     []*resLayer // per layer, its output when kept on the devices
	feats   *resLayer   // layer 1's input on the devices (Options.InputShards, or autoShards')
	// ownFeats: feats were uploaded by this run (autoShards), freed
	// after layer 1.
	ownFeats bool
	// buildSec, buildWait: per device, the current layer's host
	// building time and the compute goroutine's wait for it.
	buildSec, buildWait []time.Duration
	phases              [][numPhases]time.Duration // per device, the current layer's
	// spans: per device, the current layer's span; devStart, devEnd:
	// when its devices started and the last returned.
	spans            []span
	devStart, devEnd time.Time
	exch             []comm.Comm // the resident layers' exchange (several devices)
	ownExch          bool        // exch is this run's to close
	// abandoned: the watchdog gave up on a stalled device whose
	// goroutine may wake later; the device buffers it could touch are
	// left unfreed rather than freed under it.
	abandoned atomic.Bool
}

// hostMatrix is a layer's output for every node, in host memory.
type hostMatrix struct {
	data  []float32
	width int
	unmap func() // frees data when hostFloats mapped it; nil for Go memory
}

// release frees r.hosts[l] if hostFloats mapped it, unless a device was
// abandoned (its goroutine may still write the rows).
func (r *run) release(l int) {
	if l < len(r.hosts) {
		if h := r.hosts[l]; h.unmap != nil && !r.abandoned.Load() {
			h.unmap()
		}
		r.hosts[l] = hostMatrix{}
	}
}

func newRun(in *graph.CSR, x *Input, req Request, opts Options) (*run, error) {
	const op = "setup"
	p := len(opts.Backends)
	switch {
	case in == nil || x == nil:
		return nil, errf(op, "no graph or no features")
	case p == 0:
		return nil, errf(op, "no back end")
	case len(opts.Models) != p:
		return nil, errf(op, "%d models for %d back ends", len(opts.Models), p)
	case in.NumRows != in.NumCols || in.NumRows < 1 || in.NumRows > math.MaxInt32 || int64(len(in.Indptr)) != in.NumRows+1:
		return nil, errf(op, "graph is %d x %d with %d row offsets, want square with 1 to %d nodes", in.NumRows, in.NumCols, len(in.Indptr), int64(math.MaxInt32))
	case int64(x.Rows) != in.NumRows:
		return nil, errf(op, "%d feature rows for %d nodes", x.Rows, in.NumRows)
	case x.Sparse == nil && len(x.Dense) != x.Rows*x.Cols:
		return nil, errf(op, "%d feature values for %d x %d", len(x.Dense), x.Rows, x.Cols)
	case x.Sparse != nil && (x.Sparse.Rows != x.Rows || x.Sparse.Cols != x.Cols || len(x.Sparse.Indptr) != x.Rows+1):
		return nil, errf(op, "sparse features are %d x %d, want %d x %d", x.Sparse.Rows, x.Sparse.Cols, x.Rows, x.Cols)
	case opts.Budget != 0 && opts.Budget < MinBudget:
		return nil, errf(op, "budget %d bytes is below the minimum %d", opts.Budget, MinBudget)
	case opts.StallTimeout < 0:
		return nil, errf(op, "negative stall timeout %v", opts.StallTimeout)
	case opts.Inputs != nil && len(opts.Inputs) != p:
		return nil, errf(op, "%d device inputs for %d back ends", len(opts.Inputs), p)
	case opts.Workers < 0:
		return nil, errf(op, "%d host workers", opts.Workers)
	}
	for d, buf := range opts.Inputs {
		switch {
		case buf == nil:
		case x.Sparse != nil:
			return nil, errf(op, "device input %d given for sparse features (they are gathered as sparse rows)", d)
		case buf.DType() != backend.Float32 || buf.Len() != len(x.Dense):
			return nil, errf(op, "device input %d is %d %v values, want %d x %d float32", d, buf.Len(), buf.DType(), x.Rows, x.Cols)
		}
	}
	r := &run{in: in, x: x, opts: opts, n: int(in.NumRows)}
	for i, m := range opts.Models {
		if m == nil || opts.Backends[i] == nil {
			return nil, errf(op, "device %d has no model or no back end", i)
		}
		l, ok := m.(nn.Layered)
		if !ok {
			return nil, errf(op, "the model on %s cannot run layer by layer (%T is not nn.Layered)", opts.Backends[i].Name(), m)
		}
		r.layers = append(r.layers, l)
	}
	r.cfg = opts.Models[0].Config()
	for i, m := range opts.Models[1:] {
		if c := m.Config(); c.Kind != r.cfg.Kind || c.Layers != r.cfg.Layers || c.InDim != r.cfg.InDim || c.OutDim != r.cfg.OutDim {
			return nil, errf(op, "the model on device %d is a %s of %d layers (%d -> %d), device 0's a %s of %d (%d -> %d)",
				i+1, c.Kind, c.Layers, c.InDim, c.OutDim, r.cfg.Kind, r.cfg.Layers, r.cfg.InDim, r.cfg.OutDim)
		}
	}
	if r.cfg.InDim != x.Cols {
		return nil, errf(op, "the model reads %d features, the graph has %d", r.cfg.InDim, x.Cols)
	}
	L := r.cfg.Layers
	r.last = L - 1
	if req.Layer != 0 {
		if req.Layer < 1 || req.Layer > L {
			return nil, errf(op, "layer %d of a %d-layer model (want 1 to %d)", req.Layer, L, L)
		}
		r.last = req.Layer - 1
	}
	for i, v := range req.Nodes {
		if v < 0 || int(v) >= r.n {
			return nil, errf(op, "node %d (position %d) out of range [0, %d)", v, i, r.n)
		}
	}
	if err := r.checkOffsets(); err != nil {
		return nil, err
	}
	if err := r.checkShards(); err != nil {
		return nil, err
	}
	r.req = req
	r.scratch = make([][]*scratch, p)
	if k := opts.Keep; k != nil {
		// A Run of the same work as the kept one: its plan and chunk
		// budgets, so that its chunks are the kept ones.
		reused, err := k.attach(r)
		if err != nil || reused {
			return r, err
		}
	}
	r.plan(req.Nodes)
	if r.cfg.Kind == nn.KindGCN {
		r.gcnDeg = selfLoopOutDegrees(in)
	}
	if err := r.setBudgets(); err != nil {
		return nil, err
	}
	if k := opts.Keep; k != nil {
		k.record(r)
	}
	return r, nil
}

func (r *run) checkOffsets() error {
	p := len(r.opts.Backends)
	off := r.opts.Offsets
	if off == nil {
		off = make([]int64, p+1)
		for i := range off {
			off[i] = int64(r.n) * int64(i) / int64(p)
		}
		r.opts.Offsets = off
		return nil
	}
	if len(off) != p+1 {
		return errf("setup", "%d offsets for %d devices, want %d", len(off), p, p+1)
	}
	if off[0] != 0 || off[p] != int64(r.n) {
		return errf("setup", "offsets run from %d to %d, want 0 to %d", off[0], off[p], r.n)
	}
	for i := range p {
		if off[i+1] < off[i] {
			return errf("setup", "device %d's range [%d, %d) is reversed", i, off[i], off[i+1])
		}
	}
	return nil
}

// plan fills need: the requested layer computes the requested nodes, and
// every earlier layer the nodes the next reads. Each hop marks the
// nodes and their in-neighbors in a bitset (one bit a node: 14 MB at
// papers100M's size, where a hop reads 770M edges) by several
// goroutines, then lists the marked nodes in order: the same lists
// whatever the number of goroutines.
func (r *run) plan(nodes []int32) {
	r.need = make([][]int32, r.last+1)
	if nodes == nil {
		return // every node at every layer
	}
	cur := slices.Clone(nodes)
	slices.Sort(cur)
	cur = slices.Compact(cur)
	r.need[r.last] = cur
	workers := max(1, runtime.GOMAXPROCS(0))
	for l := r.last - 1; l >= 0; l-- {
		mark := make([]atomic.Uint64, (r.n+63)/64)
		set := func(v int32) {
			w, bit := &mark[v>>6], uint64(1)<<(v&63)
			if w.Load()&bit == 0 {
				w.Or(bit)
			}
		}
		forParts(len(cur), max(1, min(workers, len(cur)>>12)), func(_, a, b int) {
			for _, v := range cur[a:b] {
				set(v)
				for _, u := range r.in.Indices[r.in.Indptr[v]:r.in.Indptr[v+1]] {
					set(u)
				}
			}
		})
		parts := max(1, min(workers, len(mark)>>10))
		counts := make([]int, parts+1)
		forParts(len(mark), parts, func(q, a, b int) {
			for i := a; i < b; i++ {
				counts[q+1] += bits.OnesCount64(mark[i].Load())
			}
		})
		for q := range parts {
			counts[q+1] += counts[q]
		}
		if counts[parts] == r.n { // the rest of the way down every node is needed
			return
		}
		next := make([]int32, counts[parts])
		forParts(len(mark), parts, func(q, a, b int) {
			k := counts[q]
			for i := a; i < b; i++ {
				for m := mark[i].Load(); m != 0; m &= m - 1 {
					next[k] = int32(i<<6 + bits.TrailingZeros64(m))
					k++
				}
			}
		})
		r.need[l], cur = next, next
	}
}

// selfLoopOutDegrees counts, for every node j, the in-adjacency rows that
// list j plus one when j's own row lacks j: the out-degree of j in the
// self-loop graph GCN normalizes by (nn.Block.GCNWeights).
func selfLoopOutDegrees(in *graph.CSR) []int64 {
	deg := make([]int64, in.NumRows)
	for v := int64(0); v < in.NumRows; v++ {
		self := false
		for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
			deg[u]++
			self = self || int64(u) == v
		}
		if !self {
			deg[v]++
		}
	}
	return deg
}

func (r *run) setBudgets() error {
	for _, b := range r.opts.Backends {
		budget := r.opts.Budget
		if budget == 0 {
			budget = DefaultBudget
			if m, ok := b.(backend.Memory); ok {
				free, _, err := m.MemInfo()
				if err != nil {
					return &Error{Op: "memory of " + b.Name(), Err: err}
				}
				budget = max(MinBudget, min(MaxAutoBudget, int64(free/4)))
			}
		}
		r.budgets = append(r.budgets, budget)
	}
	return nil
}

func (r *run) free() {
	if r.abandoned.Load() {
		r.res = nil
	}
	for _, rl := range r.res {
		if rl != nil {
			rl.free(r.opts.Backends)
		}
	}
	r.res = nil
	if r.ownFeats && r.feats != nil && !r.abandoned.Load() {
		r.feats.free(r.opts.Backends)
	}
	for l := range r.hosts {
		r.release(l)
	}
	r.hosts = nil
	if !r.abandoned.Load() { // an abandoned device's builders may still run
		for _, ss := range r.scratch {
			for _, s := range ss {
				if s.unmap != nil {
					s.unmap()
				}
			}
		}
		r.scratch = nil
	}
	r.bar.Finish()
}

// width returns the input width of layer l.
func (r *run) width(l int) int {
	if l == 0 {
		return r.x.Cols
	}
	return r.layers[0].LayerWidth(l - 1)
}

// nodesOf returns device d's destination nodes of layer l: its part of
// need[l], starting at need[l][base] (nil: its whole range, [lo, hi)).
func (r *run) nodesOf(l, d int) (nodes []int32, lo, hi int64, base int) {
	lo, hi = r.opts.Offsets[d], r.opts.Offsets[d+1]
	need := r.need[l]
	if need == nil {
		return nil, lo, hi, 0
	}
	a, _ := slices.BinarySearch(need, int32(lo))
	b := len(need)
	if hi <= math.MaxInt32 {
		b, _ = slices.BinarySearch(need, int32(hi))
	}
	return need[a:b], lo, hi, a
}

// chunks splits device d's destinations of layer l into chunks within
// its budget: the returned bounds index the device's destination list.
func (r *run) chunks(l, d int) []int {
	nodes, lo, hi, _ := r.nodesOf(l, d)
	count := int(hi - lo)
	if nodes != nil {
		count = len(nodes)
	}
	inW := float64(r.width(l))
	if l == 0 && r.x.Sparse != nil && r.x.Rows > 0 {
		inW = 2 * float64(len(r.x.Sparse.Indices)) / float64(r.x.Rows) // indices and values
	}
	outW := float64(r.layers[0].LayerWidth(l))
	heads := 1.0
	if r.cfg.Kind == nn.KindGAT {
		heads = float64(max(r.cfg.Heads, r.cfg.OutHeads))
		outW = max(outW, float64(r.cfg.Hidden*max(r.cfg.Heads, r.cfg.OutHeads)))
	}
	budget := float64(r.budgets[d])
	bounds := []int{0}
	var used float64
	for i := range count {
		v := lo + int64(i)
		if nodes != nil {
			v = int64(nodes[i])
		}
		e := float64(r.in.Indptr[v+1]-r.in.Indptr[v]) + 1
		// Per destination: its sources' input rows, their projection and
		// aggregation, the edges' indices and weights (and attention
		// scores), its own output rows.
		cost := 4 * (e*(inW+2*outW+3+3*heads) + 4*outW)
		if used > 0 && used+cost > budget {
			bounds = append(bounds, i)
			used = 0
		}
		used += cost
	}
	if count > 0 {
		bounds = append(bounds, count)
	}
	return bounds
}

func (r *run) run(ctx context.Context) (*Result, error) {
	p := len(r.opts.Backends)
	bounds := make([][][]int, r.last+1) // layer, device -> chunk bounds
	total := 0
	for l := range bounds {
		bounds[l] = make([][]int, p)
		for d := range p {
			bounds[l][d] = r.chunks(l, d)
			total += max(len(bounds[l][d])-1, 0)
		}
	}
	if r.opts.Progress != "" {
		r.bar = progress.New(int64(total), r.opts.Progress)
	}
	res := &Result{}
	dense := r.x.Dense
	if r.opts.Inputs != nil {
		dense = nil // on the devices already
	}
	stopFetch := prefetch(r.in, dense, runtime.GOMAXPROCS(0))
	defer stopFetch()
	for l := 0; l <= r.last; l++ {
		t0 := time.Now()
		st := LayerStats{Layer: l + 1, Nodes: int64(r.n), Output: "host"}
		if r.need[l] != nil {
			st.Nodes = int64(len(r.need[l]))
		}
		for d := range p {
			st.Chunks += max(len(bounds[l][d])-1, 0)
		}
		var rin *resLayer // the layer's input, kept on the devices
		if l > 0 {
			rin = r.res[l-1]
		} else {
			rin = r.shardInput(ctx)
		}
		rl, why := r.residentPlan(ctx, l)
		for len(r.res) <= l {
			r.res = append(r.res, nil)
		}
		r.res[l] = rl
		var out hostMatrix
		stopPrep := func() {} // prepareOutput's
		if rl != nil {
			st.Output, st.ResidentBytes = "resident", rl.bytes
			out = hostMatrix{width: rl.width}
			for len(r.hosts) <= l {
				r.hosts = append(r.hosts, hostMatrix{})
			}
			r.hosts[l] = out
		} else {
			st.Why = why
			var err error
			ta := time.Now()
			if out, err = r.output(l); err != nil {
				return nil, err
			}
			// Huge pages, populated while the first chunks run: the
			// devices' downloads fault in no 4-KiB pages.
			stopPrep = prepareOutput(out.data, p, runtime.GOMAXPROCS(0))
			st.AllocSeconds = time.Since(ta).Seconds()
		}
		var placed []backend.Buffer
		var kept []bool
		var hot []*hotRows // the most-read rows of an input gathered on the host
		if rin != nil {
			st.Input = "resident"
			if l == 0 {
				st.Input = "shards"
			}
			placed, kept = make([]backend.Buffer, p), make([]bool, p)
		} else {
			var err error
			if placed, kept, err = r.place(ctx, l); err != nil {
				stopPrep()
				return nil, err
			}
			on := 0
			for _, b := range placed {
				if b != nil {
					on++
				}
			}
			switch {
			case on == p:
				st.Input = "device"
			case on == 0:
				st.Input = "host"
			default:
				st.Input = fmt.Sprintf("device on %d of %d, host", on, p)
			}
			if on < p {
				if hot, err = r.placeHot(ctx, l, placed); err != nil {
					r.freePlaced(placed, kept)
					stopPrep()
					return nil, err
				}
				if i := slices.IndexFunc(hot, func(h *hotRows) bool { return h != nil }); i >= 0 {
					st.HotRows = int64(len(hot[i].set.nodes))
				}
			}
		}
		desc := r.describe(st, rin)
		r.bar.Describe(fmt.Sprintf("%s: %s", r.opts.Progress, desc))
		r.buildSec, r.buildWait = make([]time.Duration, p), make([]time.Duration, p)
		r.phases = make([][numPhases]time.Duration, p)
		r.spans = make([]span, p)
		profiling := r.startProfiles()
		err := r.layer(ctx, l, bounds[l], out, placed, hot, rin, rl)
		stopPrep()
		if hot != nil && !r.abandoned.Load() {
			st.HotReads, st.Reads = hotCounts(hot)
			freeHot(r.opts.Backends, hot)
		}
		if profiling && err == nil { // a failed layer's devices may never drain
			st.Ops = r.stopProfiles()
		}
		for d, buf := range placed {
			if buf != nil && !kept[d] && slices.Index(placed, buf) == d && !r.abandoned.Load() { // shared by virtual devices: freed once
				r.opts.Backends[d].Free(buf)
			}
		}
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		st.Seconds = t1.Sub(t0).Seconds()
		st.SetupSeconds, st.FinishSeconds = r.devStart.Sub(t0).Seconds(), t1.Sub(r.devEnd).Seconds()
		st.Devices = r.deviceTimes()
		st.BuildSeconds, st.BuildWaitSeconds = slices.Max(r.buildSec).Seconds(), slices.Max(r.buildWait).Seconds()
		st.Phases = make(map[string]float64, numPhases)
		for i, name := range phaseNames {
			for d := range p {
				st.Phases[name] = max(st.Phases[name], r.phases[d][i].Seconds())
			}
		}
		res.Layers = append(res.Layers, st)
		if r.opts.Log != nil {
			hotNote := ""
			if st.HotRows > 0 && st.Reads > 0 {
				hotNote = fmt.Sprintf("; %d most-read input rows copied to the devices, %.1f %% of the rows read", st.HotRows, 100*float64(st.HotReads)/float64(st.Reads))
			}
			fmt.Fprintf(r.opts.Log, "inference %s: %d nodes, %d chunks, %.2f s (blocks built on the host in %.2f s a device, %.2f s of it waited for%s)\n",
				desc, st.Nodes, st.Chunks, st.Seconds, st.BuildSeconds, st.BuildWaitSeconds, hotNote)
			if r.opts.ProfileOps {
				r.logProfile(st)
			}
		}
		if l == 0 && r.ownFeats && !r.abandoned.Load() {
			r.feats.free(r.opts.Backends)
		}
		if l > 0 { // the layer below is read no more
			r.release(l - 1)
			if rin != nil {
				rin.free(r.opts.Backends)
				r.res[l-1] = nil
			}
		}
	}
	final := r.hosts[r.last]
	res.Cols = final.width
	if r.req.Nodes == nil { // handed over, with its unmap
		r.hosts[r.last] = hostMatrix{}
		res.Rows, res.Data, res.unmap = r.n, final.data, final.unmap
		return res, nil
	}
	need := r.need[r.last]
	w := final.width
	res.Rows = len(r.req.Nodes)
	res.Data = make([]float32, len(r.req.Nodes)*w)
	for i, v := range r.req.Nodes {
		k, _ := slices.BinarySearch(need, v)
		copy(res.Data[i*w:(i+1)*w], final.data[k*w:(k+1)*w])
	}
	r.release(r.last)
	return res, nil
}

// describe says where layer st.Layer reads and writes, for the
// progress bar and the log.
func (r *run) describe(st LayerStats, rin *resLayer) string {
	in := "input " + st.Input
	switch {
	case rin != nil && st.Layer == 1:
		in = fmt.Sprintf("input from the feature shards on the devices (%s a device)", gb(rin.bytes))
	case rin != nil:
		in = fmt.Sprintf("input resident (%s a device)", gb(rin.bytes))
	case st.Input == "host":
		in = "input gathered on the host"
	case st.Input == "device":
		in = "input on every device"
	}
	out := "output to host"
	if st.Output == "resident" {
		out = fmt.Sprintf("output resident on %d devices (%s a device)", len(r.opts.Backends), gb(st.ResidentBytes))
	} else if st.Why != "" && st.Layer-1 < r.last {
		out += " (" + st.Why + ")"
	}
	return fmt.Sprintf("layer %d/%d, %s, %s", st.Layer, r.last+1, in, out)
}

// maxPlaced is the largest layer input PlaceAuto puts in a device's
// memory given its free bytes (a variable: tests make inputs gathered on
// the host on a GPU that would hold them).
var maxPlaced = func(free uint64) uint64 { return free / 2 }

// place uploads layer l's input matrix to the devices that read it from
// their own memory (Options.Placement); nil entries gather on the host.
// kept[d] says device d's is not this Run's to free: Options.Keep holds
// it (the features, uploaded by this Run or an earlier one) or the
// caller does (Options.Inputs).
func (r *run) place(ctx context.Context, l int) (out []backend.Buffer, kept []bool, err error) {
	p := len(r.opts.Backends)
	out, kept = make([]backend.Buffer, p), make([]bool, p)
	if r.opts.Placement == PlaceHost || (l == 0 && r.x.Sparse != nil) {
		return out, kept, nil // sparse features are gathered as sparse rows
	}
	rows, _ := r.hostInput(l)
	bytes := uint64(len(rows)) * 4
	var uploads []int // devices given their own copy
	for d, b := range r.opts.Backends {
		if l == 0 && r.opts.Inputs != nil && r.opts.Inputs[d] != nil {
			out[d], kept[d] = r.opts.Inputs[d], true // the caller's
			continue
		}
		if l == 0 {
			if buf, _ := r.opts.Keep.features(d, nil, 0); buf != nil {
				out[d], kept[d] = buf, true
				continue
			}
		}
		if r.opts.Placement == PlaceAuto {
			m, ok := b.(backend.Memory)
			if !ok {
				continue
			}
			free, _, err := m.MemInfo()
			if err != nil || bytes > maxPlaced(free) {
				continue
			}
		}
		if d > 0 && sameBackend(r.opts.Backends[:d], b) >= 0 {
			out[d] = out[sameBackend(r.opts.Backends[:d], b)]
			continue
		}
		buf, err := b.Alloc(backend.Float32, len(rows))
		if err != nil {
			if errors.Is(err, backend.ErrOutOfMemory) {
				continue // this device gathers on the host
			}
			r.freePlaced(out, kept)
			return nil, nil, &Error{Op: fmt.Sprintf("layer %d input on %s", l+1, b.Name()), Err: err}
		}
		out[d] = buf
		uploads = append(uploads, d)
	}
	spread := false
	if l == 0 && p > 1 && len(uploads) == p && len(rows)*4 >= minSpread { // every device its own buffer: distinct back ends
		if spread, err = r.spreadFeatures(ctx, out); err != nil {
			r.freePlaced(out, kept)
			return nil, nil, err
		}
	}
	if !spread {
		// The uploads run on every device at once: one after the other,
		// the papers shape's 57 GB table took 30 s to reach 4 GPUs.
		errs := make([]error, len(out))
		var wg sync.WaitGroup
		for _, d := range uploads {
			wg.Go(func() { errs[d] = r.opts.Backends[d].Upload(out[d], rows) })
		}
		wg.Wait()
		for _, d := range uploads {
			if errs[d] != nil {
				r.freePlaced(out, kept)
				return nil, nil, &Error{Op: fmt.Sprintf("layer %d input on %s", l+1, r.opts.Backends[d].Name()), Err: errs[d]}
			}
		}
	}
	if l == 0 {
		// The features do not change between Runs: keep them when they
		// fit.
		for _, d := range uploads {
			_, kept[d] = r.opts.Keep.features(d, out[d], int64(bytes))
		}
	}
	return out, kept, nil
}

// freePlaced frees what place uploaded and did not keep.
func (r *run) freePlaced(out []backend.Buffer, kept []bool) {
	for d, buf := range out {
		if buf != nil && !kept[d] && slices.Index(out, buf) == d {
			r.opts.Backends[d].Free(buf)
		}
	}
}

// fits reports whether a layer input of bytes would be kept in the
// memory of every device (place's rule).
func (r *run) fits(bytes uint64) bool {
	switch r.opts.Placement {
	case PlaceHost:
		return false
	case PlaceDevice:
		return true
	}
	for _, b := range r.opts.Backends {
		m, ok := b.(backend.Memory)
		if !ok {
			return false
		}
		if free, _, err := m.MemInfo(); err != nil || bytes > maxPlaced(free) {
			return false
		}
	}
	return true
}

// sameBackend returns the index in bs of b (virtual devices may share one
// back end), or -1.
func sameBackend(bs []backend.Backend, b backend.Backend) int {
	for i, x := range bs {
		if x == b {
			return i
		}
	}
	return -1
}

// output allocates layer l's output matrix: every node's row below the
// requested layer, the needed nodes' rows (in need's order) at it.
func (r *run) output(l int) (hostMatrix, error) {
	w := r.layers[0].LayerWidth(l)
	rows := r.n
	if l == r.last && r.need[l] != nil {
		rows = len(r.need[l])
	}
	n := int64(rows) * int64(w)
	if n > math.MaxInt || n*4 > math.MaxInt64/2 {
		return hostMatrix{}, errf(fmt.Sprintf("layer %d", l+1), "output of %d x %d values is too large", rows, w)
	}
	// Never pinned: the next layer gathers each chunk's rows from it into
	// pinned staging (worker.staging), and place uploads it whole only
	// when it fits on the devices. Pinning a matrix that does not fit
	// (114 GB at papers100M's size) would take minutes.
	h := hostMatrix{width: w}
	h.data, h.unmap = hostFloats(int(n))
	for len(r.hosts) <= l {
		r.hosts = append(r.hosts, hostMatrix{})
	}
	r.hosts[l] = h
	return h, nil
}

// layer computes layer l on every device at once and waits for them,
// giving up on a device that finishes no chunk for the stall timeout.
// rin, when set, is the layer's input kept on the devices; rout, when
// set, receives the output instead of out. With rin on several devices
// they proceed in lockstep: every device runs as many rounds as the
// device with the most chunks (empty rounds serve the others' requests).
func (r *run) layer(ctx context.Context, l int, bounds [][]int, out hostMatrix, placed []backend.Buffer, hot []*hotRows, rin, rout *resLayer) error {
	p := len(r.opts.Backends)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rounds := 0
	if rin != nil && p > 1 {
		for d := range p {
			rounds = max(rounds, len(bounds[d])-1)
		}
	}
	want := make([]int64, p)
	for d := range p {
		want[d] = int64(max(len(bounds[d])-1, rounds))
	}
	done := make([]atomic.Int64, p)
	over := make([]atomic.Bool, p)
	errs := make([]error, p)
	var bd *board
	if rounds > 0 {
		bd = newBoard(p)
	}
	var wg sync.WaitGroup
	r.devStart = time.Now()
	for d := range p {
		w := &worker{r: r, d: d, b: r.opts.Backends[d], layer: r.layers[d], l: l, input: placed[d], rin: rin, rounds: rounds}
		if hot != nil {
			w.hot = hot[d]
		}
		if rout != nil {
			w.rout = rout.bufs[d]
		}
		if rin != nil && p > 1 {
			w.exch, w.board = r.exch[d], bd
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer over[d].Store(true)
			r.spans[d].start = time.Now()
			defer func() { r.spans[d].end = time.Now() }()
			if err := w.run(ctx, bounds[d], out, &done[d]); err != nil {
				errs[d] = err
				cancel()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); r.devEnd = time.Now(); close(finished) }()
	stall := r.stall()
	if rounds > 0 {
		// The devices waiting in the exchange for a stalled one fail
		// after the stall timeout, naming it; the watchdog comes after
		// them.
		stall *= 2
	}
	tick := time.NewTicker(min(stall/4, 5*time.Second) + time.Millisecond)
	defer tick.Stop()
	last := make([]int64, p)
	seen := make([]time.Time, p)
	for d := range seen {
		seen[d] = time.Now()
	}
	for {
		select {
		case <-finished:
			if err := firstErrors(errs); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return &Error{Op: fmt.Sprintf("layer %d", l+1), Err: err}
			}
			return nil
		case now := <-tick.C:
			var stuck []string
			for d := range p {
				c := done[d].Load()
				if c != last[d] || c == want[d] || over[d].Load() {
					last[d], seen[d] = c, now
					continue
				}
				if now.Sub(seen[d]) > stall {
					what := "chunk"
					if rounds > 0 {
						what = "round"
					}
					stuck = append(stuck, fmt.Sprintf("%s (%s %d of %d)", r.opts.Backends[d].Name(), what, last[d]+1, want[d]))
				}
			}
			if len(stuck) > 0 {
				r.abandoned.Store(true)
				cancel()
				err := errf(fmt.Sprintf("layer %d", l+1), "no chunk finished for %v on %v", stall, stuck)
				var others []error
				for d := range p {
					if over[d].Load() && errs[d] != nil {
						others = append(others, errs[d])
					}
				}
				return errors.Join(append([]error{err}, others...)...)
			}
		}
	}
}

// firstErrors joins the devices' errors, leaving out those that only
// follow another device's failure (a cancelled context, a peer's
// failure reported in the exchange) when a device reported its own.
func firstErrors(errs []error) error {
	var own []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrPeer) {
			own = append(own, err)
		}
	}
	if own != nil {
		return errors.Join(own...)
	}
	return errors.Join(errs...)
}
