// Package commbench measures collective bandwidth per back end against
// message size: the library behind 'strata bench comm'. Run starts the
// ranks (goroutines for inproc, processes through comm/launch for shm and
// tcp), times each size and reports algorithm and bus bandwidth in the
// nccl-tests convention (bus bandwidth = algorithm bandwidth x 2(n-1)/n for
// all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1
// for broadcast), as a table and as JSON.
//
// Processes are started by re-executing Config.Self with ChildEnv set;
// the program must call ChildMain early when IsChild reports true.
package commbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/dist"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// ChildEnv carries a child's job (JSON) from Run to ChildMain.
const ChildEnv = "STRATA_COMMBENCH_CHILD"

// Config describes a benchmark run.
type Config struct {
	// Backends to measure (inproc, shm, tcp, auto), each optionally with
	// ":plain" to use Go-heap buffers instead of Comm.Alloc (for shm the
	// difference between staging through slots and working in place);
	// default inproc, shm, shm:plain, tcp.
	Backends []string
	// Procs is the number of ranks (default 2).
	Procs int
	// Op is all_reduce (default), broadcast, all_gather, all_to_all or
	// reduce_scatter.
	Op string
	// MinBytes and MaxBytes bound the message sizes (4 KiB and 256 MiB by
	// default); sizes grow by Factor (4 by default).
	MinBytes, MaxBytes int64
	Factor             int64
	// Budget is the data volume timed per size (512 MiB by default): the
	// iteration count is Budget/size, clamped to [MinIters, MaxIters].
	Budget             int64
	MinIters, MaxIters int
	// Repeats times each size this many times and reports the median
	// (3 by default).
	Repeats int
	// Timeout bounds each collective (1 minute by default).
	Timeout time.Duration
	// Self is the argv that re-executes this program as a child rank
	// (default: os.Args).
	Self []string
	// Log, if set, receives progress lines.
	Log io.Writer
	// Tuning: 0 means the back end's default.
	ShmSlotBytes, TCPSegmentBytes int
	ShmReducer                    string
	// GPUShm tunes the gpushm back end (its comm.Options are the
	// benchmark's); NCCLAsync makes NCCL's operations return once
	// queued (nccl.Options.Async). The ranks take both from the job, not
	// from their environment.
	GPUShm    gpushm.Options
	NCCLAsync bool
}

func (c *Config) defaults() error {
	if len(c.Backends) == 0 {
		c.Backends = []string{comm.KindInproc, comm.KindShm, comm.KindShm + plainSuffix, comm.KindTCP}
	}
	if c.Procs == 0 {
		c.Procs = 2
	}
	if c.Procs < 1 || c.Procs > launch.MaxProcs {
		return fmt.Errorf("commbench: %d ranks", c.Procs)
	}
	if c.Op == "" {
		c.Op = comm.OpAllReduce.String()
	}
	if _, err := parseOp(c.Op); err != nil {
		return err
	}
	if c.MinBytes == 0 {
		c.MinBytes = 4 << 10
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 256 << 20
	}
	if c.Factor == 0 {
		c.Factor = 4
	}
	if c.MinBytes < 8 || c.MaxBytes < c.MinBytes || c.MaxBytes > 16<<30 || c.Factor < 2 {
		return fmt.Errorf("commbench: sizes %d..%d by x%d", c.MinBytes, c.MaxBytes, c.Factor)
	}
	if c.Budget == 0 {
		c.Budget = 512 << 20
	}
	if c.MinIters == 0 {
		c.MinIters = 3
	}
	if c.MaxIters == 0 {
		c.MaxIters = 2000
	}
	if c.Repeats == 0 {
		c.Repeats = 3
	}
	if c.Repeats < 1 || c.MinIters < 1 || c.MaxIters < c.MinIters {
		return fmt.Errorf("commbench: %d repeats of %d..%d iterations", c.Repeats, c.MinIters, c.MaxIters)
	}
	if c.Timeout == 0 {
		c.Timeout = time.Minute
	}
	if len(c.Self) == 0 {
		c.Self = os.Args
	}
	if err := c.GPUShm.Validate(); err != nil {
		return fmt.Errorf("commbench: %w", err)
	}
	for _, b := range c.Backends {
		switch strings.TrimSuffix(b, plainSuffix) {
		case comm.KindInproc, comm.KindShm, comm.KindTCP, comm.KindAuto:
		case comm.KindNCCL, comm.KindGPUShm, KindGPUAuto, KindGPUTCP: // device buffers (device.go)
		default:
			return fmt.Errorf("commbench: cannot benchmark back end %q (inproc, shm, tcp, auto; on GPUs nccl, gpushm, gpu-auto, gpu-tcp)", b)
		}
	}
	return nil
}

func parseOp(s string) (comm.Op, error) {
	for _, op := range []comm.Op{comm.OpAllReduce, comm.OpBroadcast, comm.OpAllGather, comm.OpAllToAll, comm.OpReduceScatter} {
		if op.String() == s {
			return op, nil
		}
	}
	return 0, fmt.Errorf("commbench: unknown op %q (all_reduce, broadcast, all_gather, all_to_all, reduce_scatter)", s)
}

const plainSuffix = ":plain"

// Sizes lists the message sizes of cfg (after defaults), each a multiple
// of 4 bytes times the number of ranks.
func (c Config) Sizes() []int64 {
	var s []int64
	unit := int64(4 * c.Procs)
	for b := c.MinBytes; b <= c.MaxBytes; b *= c.Factor {
		s = append(s, max(unit, b/unit*unit))
	}
	return s
}

// Point is one message size's measurement.
type Point struct {
	Bytes   int64   `json:"bytes"`
	Iters   int     `json:"iters"`
	Seconds float64 `json:"seconds_per_op"` // slowest rank
	AlgBW   float64 `json:"alg_gb_per_s"`
	BusBW   float64 `json:"bus_gb_per_s"`
}

// Series is one back end's measurements.
type Series struct {
	Backend string `json:"backend"`
	Chosen  string `json:"chosen,omitempty"` // the back end opened (what auto picked)
	Reason  string `json:"reason,omitempty"` // why (device back ends)
	// The settings measured, when gpushm or NCCL was opened.
	GPUShm    *gpushm.Options `json:"gpushm,omitempty"`
	NCCLAsync bool            `json:"nccl_async,omitempty"`
	Points    []Point         `json:"points"`
	Error     string          `json:"error,omitempty"`
}

// Report is a whole run.
type Report struct {
	Op         string    `json:"op"`
	DType      string    `json:"dtype"`
	Procs      int       `json:"ranks"`
	GOOS       string    `json:"goos"`
	GOARCH     string    `json:"goarch"`
	NumCPU     int       `json:"num_cpu"`
	GoVersion  string    `json:"go_version"`
	Start      time.Time `json:"start"`
	Series     []Series  `json:"series"`
	BusFactor  float64   `json:"bus_factor"`
	SizeMeans  string    `json:"size_means"`
	TimingNote string    `json:"timing"`
}

func busFactor(op comm.Op, n int) float64 {
	switch op {
	case comm.OpAllReduce:
		return 2 * float64(n-1) / float64(n)
	case comm.OpBroadcast:
		return 1
	}
	return float64(n-1) / float64(n)
}

// Run measures every back end of cfg.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	op, _ := parseOp(cfg.Op)
	rep := &Report{Op: cfg.Op, DType: "float32", Procs: cfg.Procs, GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), Start: time.Now(), BusFactor: busFactor(op, cfg.Procs),
		SizeMeans:  "bytes of the largest per-rank buffer (all_reduce, broadcast: the buffer; all_gather: the gathered result; all_to_all, reduce_scatter: the send buffer)",
		TimingNote: "per size: one warm-up, then Repeats runs of Budget/size iterations (clamped) between barriers; each run's time is the slowest rank's; the median run is reported"}
	for _, b := range cfg.Backends {
		logf(cfg.Log, "commbench: %s, %d ranks, %s\n", b, cfg.Procs, cfg.Op)
		var s Series
		var err error
		kind, plain := strings.TrimSuffix(b, plainSuffix), strings.HasSuffix(b, plainSuffix)
		if kind == comm.KindInproc {
			s, err = runInproc(ctx, cfg, op, plain)
		} else {
			s, err = runProcs(ctx, cfg, kind, plain)
		}
		s.Backend = b
		if err != nil {
			s.Error = err.Error()
			logf(cfg.Log, "commbench: %s failed: %v\n", b, err)
		}
		rep.Series = append(rep.Series, s)
	}
	return rep, nil
}

func logf(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format, a...)
	}
}

func runInproc(ctx context.Context, cfg Config, op comm.Op, plain bool) (Series, error) {
	cs, err := inproc.New(cfg.Procs, comm.Options{Timeout: cfg.Timeout})
	if err != nil {
		return Series{}, err
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	pts := make([][]Point, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pts[r], errs[r] = measure(ctx, c, cfg, op, plain)
		}()
	}
	wg.Wait()
	return Series{Chosen: comm.KindInproc, Points: pts[0]}, errors.Join(errs...)
}

// child is the job a child process runs.
type child struct {
	Config Config `json:"config"`
	Kind   string `json:"kind"`
	Plain  bool   `json:"plain"`
	Result string `json:"result"` // file rank 0 writes the series to
}

func runProcs(ctx context.Context, cfg Config, kind string, plain bool) (Series, error) {
	f, err := os.CreateTemp("", "strata-commbench-*.json")
	if err != nil {
		return Series{}, err
	}
	f.Close()
	defer os.Remove(f.Name())
	job, err := json.Marshal(child{Config: Config{Procs: cfg.Procs, Op: cfg.Op, MinBytes: cfg.MinBytes, MaxBytes: cfg.MaxBytes,
		Factor: cfg.Factor, Budget: cfg.Budget, MinIters: cfg.MinIters, MaxIters: cfg.MaxIters, Timeout: cfg.Timeout,
		ShmSlotBytes: cfg.ShmSlotBytes, TCPSegmentBytes: cfg.TCPSegmentBytes, ShmReducer: cfg.ShmReducer,
		GPUShm: cfg.GPUShm, NCCLAsync: cfg.NCCLAsync}, Kind: kind, Plain: plain, Result: f.Name()})
	if err != nil {
		return Series{}, err
	}
	var out strings.Builder
	_, err = launch.Run(ctx, launch.Config{N: cfg.Procs, Command: cfg.Self, Env: []string{ChildEnv + "=" + string(job)},
		Stdout: &out, Stderr: &out, Prefix: true})
	if err != nil {
		return Series{}, fmt.Errorf("%w\n%s", err, out.String())
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return Series{}, err
	}
	var s Series
	if err := json.Unmarshal(b, &s); err != nil {
		return Series{}, fmt.Errorf("commbench: reading rank 0's results: %w", err)
	}
	return s, nil
}

// IsChild reports whether this process was started by Run as a rank.
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

// ChildMain runs this process's rank of a benchmark started by Run.
func ChildMain(ctx context.Context) error {
	var job child
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &job); err != nil {
		return fmt.Errorf("commbench: bad %s: %w", ChildEnv, err)
	}
	cfg := job.Config
	if err := cfg.defaults(); err != nil {
		return err
	}
	op, _ := parseOp(cfg.Op)
	if isDevice(job.Kind) {
		return deviceChildMain(ctx, job, cfg, op)
	}
	heap := -1
	if !job.Plain {
		heap = int(2*cfg.MaxBytes) + 1<<20 // room for a send and a receive buffer of the largest size
	}
	c, info, err := dist.Init(ctx, dist.Options{Backend: job.Kind, Comm: comm.Options{Timeout: cfg.Timeout},
		ShmSlotBytes: cfg.ShmSlotBytes, TCPSegmentBytes: cfg.TCPSegmentBytes, ShmReducer: cfg.ShmReducer, ShmHeapBytes: heap})
	if err != nil {
		return err
	}
	defer c.Close()
	pts, err := measure(ctx, c, cfg, op, job.Plain)
	if err != nil {
		return err
	}
	if c.Rank() != 0 {
		return nil
	}
	b, err := json.Marshal(Series{Backend: job.Kind, Chosen: info.Kind, Points: pts})
	if err != nil {
		return err
	}
	return os.WriteFile(job.Result, b, 0o600)
}

// Measure times op for every size of cfg on communicator c, with buffers
// from c.Alloc; every rank calls it, each gets the same points.
func Measure(ctx context.Context, c comm.Comm, cfg Config, op comm.Op) ([]Point, error) {
	return measure(ctx, c, cfg, op, false)
}

func measure(ctx context.Context, c comm.Comm, cfg Config, op comm.Op, plain bool) ([]Point, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	n := c.Size()
	var pts []Point
	for _, size := range cfg.Sizes() {
		iters := int(min(max(cfg.Budget/size, int64(cfg.MinIters)), int64(cfg.MaxIters)))
		run, free, err := prepare(c, op, size, plain)
		if err != nil {
			return nil, err
		}
		if err := run(ctx); err != nil { // warm-up: page faults, connections
			return nil, err
		}
		times := make([]float64, cfg.Repeats)
		for k := range times {
			if err := c.Barrier(ctx); err != nil {
				return nil, err
			}
			start := time.Now()
			for i := 0; i < iters; i++ {
				if err := run(ctx); err != nil {
					return nil, err
				}
			}
			el := []float32{float32(time.Since(start).Seconds())}
			if err := c.AllReduce(ctx, cpu.WrapF32(el), comm.Max); err != nil {
				return nil, err
			}
			times[k] = float64(el[0])
		}
		free()
		slices.Sort(times)
		sec := times[len(times)/2] / float64(iters)
		alg := float64(size) / sec / 1e9
		pts = append(pts, Point{Bytes: size, Iters: iters, Seconds: sec, AlgBW: alg, BusBW: alg * busFactor(op, n)})
	}
	return pts, nil
}

// prepare allocates the buffers for one size (from c.Alloc unless plain)
// and returns the operation and how to free them.
func prepare(c comm.Comm, op comm.Op, size int64, plain bool) (func(context.Context) error, func(), error) {
	n := int64(c.Size())
	elems := size / 4
	var bufs []backend.Buffer
	get := func(k int64) (backend.Buffer, error) {
		if plain {
			return cpu.WrapF32(make([]float32, k)), nil
		}
		b, err := c.Alloc(backend.Float32, int(k))
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	free := func() {
		for _, b := range bufs {
			c.Free(b)
		}
	}
	one, two := elems, int64(0)
	switch op {
	case comm.OpAllGather:
		one, two = elems/n*n, elems/n
	case comm.OpAllToAll:
		one, two = elems/n*n, elems/n*n
	case comm.OpReduceScatter:
		one, two = elems/n, elems/n*n
	}
	a, err := get(one)
	if err != nil {
		free()
		return nil, nil, err
	}
	var b backend.Buffer = cpu.WrapF32(nil)
	if two > 0 {
		if b, err = get(two); err != nil {
			free()
			return nil, nil, err
		}
	}
	for _, x := range []backend.Buffer{a, b} {
		v := cpu.F32(x)
		if v == nil && x.Len() > 0 {
			free()
			return nil, nil, fmt.Errorf("commbench: the %s communicator's buffers are not host memory (use MeasureDevice)", c.Kind())
		}
		for i := range v {
			v[i] = 1
		}
	}
	var run func(context.Context) error
	switch op {
	case comm.OpAllReduce:
		run = func(ctx context.Context) error { return c.AllReduce(ctx, a, comm.Sum) }
	case comm.OpBroadcast:
		run = func(ctx context.Context) error { return c.Broadcast(ctx, a, 0) }
	case comm.OpAllGather:
		run = func(ctx context.Context) error { return c.AllGather(ctx, a, b) }
	case comm.OpAllToAll:
		run = func(ctx context.Context) error { return c.AllToAll(ctx, a, b) }
	case comm.OpReduceScatter:
		run = func(ctx context.Context) error { return c.ReduceScatter(ctx, a, b, comm.Sum) }
	default:
		free()
		return nil, nil, fmt.Errorf("commbench: op %v", op)
	}
	return run, free, nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteTable prints bus bandwidth (GB/s) per back end against size, and
// the shm/tcp ratio when both were measured.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%s, %d ranks, %s (%s/%s, %d CPUs, %s); bus bandwidth in GB/s\n", r.Op, r.Procs, r.DType, r.GOOS, r.GOARCH, r.NumCPU, r.GoVersion)
	fmt.Fprintf(w, "%10s", "size")
	idx := map[string]int{}
	for i, s := range r.Series {
		name := s.Backend
		if s.Backend == comm.KindAuto && s.Chosen != "" {
			name += "=" + s.Chosen
		}
		fmt.Fprintf(w, " %12s", name)
		idx[s.Backend] = i
	}
	si, okS := idx[comm.KindShm]
	ti, okT := idx[comm.KindTCP]
	ratio := okS && okT
	if ratio {
		fmt.Fprintf(w, " %9s", "shm/tcp")
	}
	fmt.Fprintln(w)
	rows := 0
	for _, s := range r.Series {
		rows = max(rows, len(s.Points))
	}
	for i := 0; i < rows; i++ {
		var size int64
		for _, s := range r.Series {
			if i < len(s.Points) {
				size = s.Points[i].Bytes
			}
		}
		fmt.Fprintf(w, "%10s", human(size))
		for _, s := range r.Series {
			if i < len(s.Points) {
				fmt.Fprintf(w, " %12.3f", s.Points[i].BusBW)
			} else {
				fmt.Fprintf(w, " %12s", "-")
			}
		}
		if ratio && i < len(r.Series[si].Points) && i < len(r.Series[ti].Points) {
			fmt.Fprintf(w, " %8.2fx", r.Series[si].Points[i].BusBW/r.Series[ti].Points[i].BusBW)
		}
		fmt.Fprintln(w)
	}
	for _, s := range r.Series {
		if s.Error != "" {
			fmt.Fprintf(w, "%s failed: %s\n", s.Backend, firstLine(s.Error))
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func human(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20:
		if b%(1<<20) == 0 {
			return fmt.Sprintf("%d MiB", b>>20)
		}
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		if b%(1<<10) == 0 {
			return fmt.Sprintf("%d KiB", b>>10)
		}
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
