package dpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/devdist"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/gputrain"
)

// EnvBenchDataset names the dataset directory of the benchmark (e.g.
// one written by `strata gen DIR --preset products`).
const EnvBenchDataset = "STRATA_BENCH_DATASET"

// Child-process settings.
const (
	envConfig = "STRATA_DP_CONFIG" // Config as JSON
	envDevice = "STRATA_DP_DEVICE" // cpu or cuda (LOCAL_RANK picks the GPU)
	envComm   = "STRATA_DP_COMM"   // devdist back end
	envData   = "STRATA_DP_DATA"   // dataset directory, or "cora"
	// envVariants lists communicators to train with one after another in
	// the same processes (one dataset load): space-separated
	// label=kind[:ENV=VAL,...] entries, kind nccl or gpushm, the
	// environment set while that communicator opens (its STRATA_GPUSHM_*
	// or STRATA_NCCL_ASYNC settings apply then, through FromEnv).
	envVariants = "STRATA_DP_VARIANTS"
)

type variant struct {
	label, kind string
	env         []string
}

func parseVariants(s string) ([]variant, error) {
	var vs []variant
	for _, f := range strings.Fields(s) {
		label, rest, ok := strings.Cut(f, "=")
		if !ok || label == "" {
			return nil, fmt.Errorf("%s: entry %q is not label=kind[:ENV=VAL,...]", envVariants, f)
		}
		kind, envs, _ := strings.Cut(rest, ":")
		if kind != "nccl" && kind != "gpushm" {
			return nil, fmt.Errorf("%s: entry %q: kind %q, want nccl or gpushm", envVariants, f, kind)
		}
		v := variant{label: label, kind: kind}
		if envs != "" {
			for _, e := range strings.Split(envs, ",") {
				if !strings.Contains(e, "=") {
					return nil, fmt.Errorf("%s: entry %q: %q is not ENV=VAL", envVariants, f, e)
				}
				v.env = append(v.env, e)
			}
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("%s is empty", envVariants)
	}
	return vs, nil
}

// variantTimeout bounds every operation of a variant's communicator (a
// failing variant costs at most this much).
const variantTimeout = 30 * time.Second

// runVariant opens v's communicator (its environment set) and trains.
func runVariant(ctx context.Context, be backend.Backend, store rendezvous.Store, src train.BatchSource, d Data, cfg Config, v variant, prefix string) (Result, error) {
	var c comm.Comm
	var err error
	o := comm.Options{Timeout: variantTimeout}
	if v.kind == "nccl" {
		// The variant's environment applies through FromEnv, as in the
		// strata command.
		no, _, ferr := nccl.FromEnv(nccl.Options{Options: o, Prefix: prefix})
		if ferr != nil {
			return Result{}, ferr
		}
		c, err = nccl.Open(ctx, store, be, no)
	} else {
		gso, _, ferr := gpushm.FromEnv(gpushm.Options{Options: o, Prefix: prefix})
		if ferr != nil {
			return Result{}, ferr
		}
		c, err = gpushm.Open(ctx, store, be, gso)
	}
	if err != nil {
		return Result{}, err
	}
	res, err := Run(ctx, be, c, src, d, cfg)
	if err == nil {
		err = c.Barrier(ctx)
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return res, err
}

// runVariants trains with each variant's communicator in turn, opened
// through one store, and prints a result line per variant.
func runVariants(ctx context.Context, be backend.Backend, src train.BatchSource, d Data, cfg Config, vs []variant) error {
	env, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	store, _, err := rendezvous.JoinEnv(ctx, env, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	if os.Getenv("NCCL_SOCKET_IFNAME") == "" {
		os.Setenv("NCCL_SOCKET_IFNAME", "lo") // one host
	}
	for i, v := range vs {
		var old []string
		for _, e := range v.env {
			k, val, _ := strings.Cut(e, "=")
			old = append(old, k+"="+os.Getenv(k))
			os.Setenv(k, val)
		}
		prefix := fmt.Sprintf("dp%d/%s", i, v.kind)
		res, err := runVariant(ctx, be, store, src, d, cfg, v, prefix)
		for _, e := range old {
			k, val, _ := strings.Cut(e, "=")
			if val == "" {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, val)
			}
		}
		if err != nil {
			// Report and go on: the next variant still measures.
			fmt.Printf("rank %d: variant %s failed: %v\n", env.Rank, v.label, err)
		} else {
			res.Kind = v.label
			fmt.Println(res)
		}
		if err := store.Barrier(ctx, prefix+"/done"); err != nil {
			return err
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	commtest.Main(m, map[string]func() error{"rank": rankMain})
}

// rankMain is one rank of a data-parallel job.
func rankMain() error {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", envConfig, err)
	}
	var ds *dataset.Dataset
	var err error
	if dir := os.Getenv(envData); dir == "cora" {
		ds, err = builtin.Load("cora")
	} else {
		ds, err = dataset.Open(dir, dataset.OpenOptions{Quiet: true, SkipChecksums: true})
	}
	if err != nil {
		return err
	}
	if ds.Features == nil {
		return fmt.Errorf("dataset has no dense features")
	}
	g := ds.InGraph()
	var be backend.Backend
	var src train.BatchSource
	if os.Getenv(envDevice) == "cuda" {
		lr, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
		// The CUDA back end is registered: comm/nccl links it in.
		dev, err := backend.Open(fmt.Sprintf("cuda:%d", lr))
		if err != nil {
			return err
		}
		if c, ok := dev.(io.Closer); ok {
			defer c.Close()
		}
		be = dev
		if src, err = gputrain.New(gputrain.Options{})(dev, g, ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.Fanouts); err != nil {
			return err
		}
	} else {
		c, err := cpu.New(cpu.Options{})
		if err != nil {
			return err
		}
		be = c
		s, err := sample.NewNeighborSampler(g, sample.Config{Fanouts: cfg.Fanouts})
		if err != nil {
			return err
		}
		src = &hostSource{b: c, s: s, x: ds.Features, cols: ds.FeatDim}
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	data := Data{Train: ds.Train, Labels: ds.Labels, FeatDim: ds.FeatDim, Classes: ds.NumClasses}
	if s := os.Getenv(envVariants); s != "" {
		vs, err := parseVariants(s)
		if err != nil {
			return err
		}
		return runVariants(ctx, be, src, data, cfg, vs)
	}
	gso, _, err := gpushm.FromEnv(gpushm.Options{})
	if err != nil {
		return err
	}
	no, _, err := nccl.FromEnv(nccl.Options{})
	if err != nil {
		return err
	}
	c, info, err := devdist.Init(ctx, be, devdist.Options{Backend: os.Getenv(envComm), GPUShm: gso, NCCL: no})
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := Run(ctx, be, c, src, data, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("%s (%s)\n", res, info.Reason)
	return c.Barrier(ctx) // rank 0 serves the store: leave together
}

// hostSource is a BatchSource from the host sampler (CPU runs).
type hostSource struct {
	b    backend.Backend
	s    sample.Sampler
	x    []float32
	cols int
}

func (h *hostSource) Prefetch([]int32, sample.Key) error { return nil }

func (h *hostSource) Batch(seeds []int32, key sample.Key) ([]*nn.Block, backend.Buffer, func(), error) {
	mb, err := h.s.Sample(seeds, key)
	if err != nil {
		return nil, nil, nil, err
	}
	blocks, err := nn.UploadBlocks(h.b, mb)
	if err != nil {
		return nil, nil, nil, err
	}
	release := func() { nn.FreeBlocks(blocks) }
	in := mb.InputNodes()
	x := make([]float32, 0, len(in)*h.cols)
	for _, v := range in {
		x = append(x, h.x[int(v)*h.cols:int(v+1)*h.cols]...)
	}
	buf, err := h.b.Alloc(backend.Float32, len(x))
	if err == nil {
		err = h.b.Upload(buf, x)
	}
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return blocks, buf, func() { release(); h.b.Free(buf) }, nil
}

func (h *hostSource) Close() error { return nil }

var resultLine = regexp.MustCompile(`rank (\d+): dpstep kind=(\S+) size=(\d+) steps=(\d+) ms/step=([0-9.]+) grad_elems=(\d+) loss=([0-9.eE+-]+) params=([0-9.eE+-]+)(?: phases_us (.*))?`)

type rankResult struct {
	kind   string
	ms     float64
	params float64
	loss   float64
	elems  int
	phases string
}

// launchJob runs n ranks and returns their results by rank.
func launchJob(ctx context.Context, n int, cfg Config, env ...string) ([]rankResult, string, error) {
	all, labels, out, err := launchVariants(ctx, n, cfg, env...)
	if err != nil {
		return nil, out, err
	}
	if len(labels) != 1 {
		return nil, out, fmt.Errorf("%d result kinds, want 1", len(labels))
	}
	return all[labels[0]], out, nil
}

// launchVariants runs n ranks and returns their results by kind (or
// variant label, in order of appearance) and rank.
func launchVariants(ctx context.Context, n int, cfg Config, env ...string) (map[string][]rankResult, []string, string, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	var out strings.Builder
	_, err = launch.Run(ctx, launch.Config{N: n, Command: commtest.Command(),
		Env:    append([]string{commtest.RoleEnv + "=rank", envConfig + "=" + string(js)}, env...),
		Stdout: &out, Stderr: &out, Prefix: true})
	s := out.String()
	if err != nil {
		return nil, nil, s, err
	}
	res := map[string][]rankResult{}
	var labels []string
	for _, m := range resultLine.FindAllStringSubmatch(s, -1) {
		r, _ := strconv.Atoi(m[1])
		if r < 0 || r >= n {
			return nil, nil, s, fmt.Errorf("result of rank %d in a job of %d", r, n)
		}
		k := m[2]
		if res[k] == nil {
			res[k] = make([]rankResult, n)
			labels = append(labels, k)
		}
		if res[k][r].kind != "" {
			return nil, nil, s, fmt.Errorf("rank %d reported %s twice", r, k)
		}
		ms, _ := strconv.ParseFloat(m[5], 64)
		el, _ := strconv.Atoi(m[6])
		loss, _ := strconv.ParseFloat(m[7], 64)
		p, _ := strconv.ParseFloat(m[8], 64)
		res[k][r] = rankResult{kind: k, ms: ms, elems: el, loss: loss, params: p, phases: m[9]}
	}
	// Keep the kinds every rank reported (a variant that failed says so
	// in the output).
	complete := labels[:0]
	for _, k := range labels {
		ok := true
		for _, x := range res[k] {
			ok = ok && x.kind != ""
		}
		if ok {
			complete = append(complete, k)
		} else {
			delete(res, k)
		}
	}
	labels = complete
	if len(labels) == 0 {
		return nil, nil, s, fmt.Errorf("no rank reported a result")
	}
	return res, labels, s, nil
}

func TestFlatGrads(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps := []*nn.Param{}
	for i, n := range []int{3, 5, 2} {
		p, err := nn.NewParam(b, fmt.Sprintf("p%d", i), 1, n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	orig := ps[1].Grad
	flat, restore, err := FlatGrads(b, ps)
	if err != nil {
		t.Fatal(err)
	}
	if flat.Len() != 10 {
		t.Fatalf("flat has %d elements, want 10", flat.Len())
	}
	for i, p := range ps {
		if err := b.Fill(p.Grad, float32(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]float32, 10)
	if err := b.Download(got, flat); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 1, 1, 2, 2, 2, 2, 2, 3, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("flat = %v, want %v", got, want)
		}
	}
	restore()
	if ps[1].Grad != orig {
		t.Fatal("restore did not put back the original gradient")
	}
	if _, _, err := FlatGrads(b, []*nn.Param{{Name: "x"}}); err == nil {
		t.Fatal("FlatGrads accepted a parameter without a gradient")
	}
}

// TestDataParallelCPU trains 2-layer SAGE on Cora with two CPU processes
// averaging gradients through each host-capable back end, and requires
// the ranks to end with identical parameters (the mean gradient is the
// same on both) that differ between one and two ranks' worth of data.
func TestDataParallelCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cfg := Config{Steps: 4, Warmup: 2, BatchSize: 32, Hidden: 16, Layers: 2, Fanouts: []int{5, 5}, Seed: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var sums []float64
	for _, kind := range []string{"gpushm", "tcp"} {
		res, out, err := launchJob(ctx, 2, cfg, envDevice+"=cpu", envComm+"="+kind, envData+"=cora")
		if err != nil {
			t.Fatalf("%s: %v\n%s", kind, err, out)
		}
		if res[0].params != res[1].params {
			t.Errorf("%s: ranks end with different parameters: %v vs %v\n%s", kind, res[0].params, res[1].params, out)
		}
		if res[0].loss == res[1].loss {
			t.Errorf("%s: both ranks report loss %v: they should train on different batches", kind, res[0].loss)
		}
		if !strings.Contains(res[0].kind, kind) || res[0].elems <= 0 {
			t.Errorf("%s: rank 0 reports back end %q, %d gradient elements", kind, res[0].kind, res[0].elems)
		}
		sums = append(sums, res[0].params)
	}
	// The back ends reduce in rank order: the same job gives the same model.
	if sums[0] != sums[1] {
		t.Errorf("gpushm and tcp train different models: %v vs %v", sums[0], sums[1])
	}
	one, out, err := launchJob(ctx, 1, cfg, envDevice+"=cpu", envComm+"=gpushm", envData+"=cora")
	if err != nil {
		t.Fatalf("1 rank: %v\n%s", err, out)
	}
	if one[0].params == sums[0] {
		t.Errorf("1 and 2 ranks train the same model (%v): the all-reduce had no effect", sums[0])
	}
}

// TestVariantsCPU trains with two communicators in turn in the same two
// processes (the benchmark's way of comparing back ends on one dataset
// load): both report, ranks agree, and the same job gives the same model.
func TestVariantsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cfg := Config{Steps: 3, Warmup: 1, BatchSize: 32, Hidden: 16, Layers: 2, Fanouts: []int{5, 5}, Seed: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, labels, out, err := launchVariants(ctx, 2, cfg, envDevice+"=cpu", envData+"=cora",
		envVariants+"=one=gpushm two=gpushm:STRATA_GPUSHM_CHUNKS=2,STRATA_GPUSHM_TRACE=1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Join(labels, ",") != "one,two" {
		t.Fatalf("results for %v, want one, two\n%s", labels, out)
	}
	for _, k := range labels {
		if r := res[k]; r[0].params != r[1].params || r[0].phases == "" {
			t.Errorf("%s: parameters %v vs %v, phases %q", k, r[0].params, r[1].params, r[0].phases)
		}
	}
	if res["one"][0].params != res["two"][0].params {
		t.Errorf("the variants train different models: %v vs %v", res["one"][0].params, res["two"][0].params)
	}
	if !strings.Contains(out, "gpushm trace rank 1:") || strings.Count(out, "gpushm trace") != 2 {
		t.Errorf("want a trace line per rank from the traced variant only:\n%s", out)
	}
	for _, bad := range []string{"", "x", "a=tcp", "a=gpushm:NOEQ"} {
		if _, err := parseVariants(bad); err == nil {
			t.Errorf("parseVariants(%q) accepted", bad)
		}
	}
}

// Variants of BenchmarkDataParallelStep with NCCL_P2P_DISABLE=1, in
// order (see envVariants): NCCL; gpushm as measured on 2026-11-21 (host
// pipeline, time.Sleep naps: "legacy"); the host pipeline with precise
// naps ("pipe"); the defaults (device path, synchronous); the device path
// asynchronous. Each gpushm variant runs once with phase tracing
// (-trace) and once without; NCCL and the untraced defaults run again
// at the end, to show drift.
const benchVariantsOff = "nccl=nccl" +
	" gpushm-legacy-trace=gpushm:STRATA_GPUSHM_DEVICE_MAX=-1,STRATA_GPUSHM_IDLE=gosleep,STRATA_GPUSHM_TRACE=1" +
	" gpushm-pipe-trace=gpushm:STRATA_GPUSHM_DEVICE_MAX=-1,STRATA_GPUSHM_TRACE=1" +
	" gpushm-trace=gpushm:STRATA_GPUSHM_TRACE=1" +
	" gpushm-async-trace=gpushm:STRATA_GPUSHM_ASYNC=1,STRATA_GPUSHM_TRACE=1" +
	" gpushm-legacy=gpushm:STRATA_GPUSHM_DEVICE_MAX=-1,STRATA_GPUSHM_IDLE=gosleep" +
	" gpushm-pipe=gpushm:STRATA_GPUSHM_DEVICE_MAX=-1" +
	" gpushm=gpushm" +
	" gpushm-async=gpushm:STRATA_GPUSHM_ASYNC=1" +
	" nccl-2=nccl gpushm-2=gpushm gpushm-async-2=gpushm:STRATA_GPUSHM_ASYNC=1"

// BenchmarkDataParallelStep times a data-parallel training step of
// 3-layer GraphSAGE (hidden 256, batch 1024 per GPU, fanouts [15, 10, 5],
// Adam) on the dataset in $STRATA_BENCH_DATASET with one process per GPU
// on 2 GPUs: one job with NCCL_P2P_DISABLE=1 trains with each of
// benchVariantsOff ($STRATA_DP_BENCH_VARIANTS overrides them) in turn,
// one with P2P on trains with NCCL (skipped with
// STRATA_DP_BENCH_P2P_ON=0). $STRATA_DP_STEPS (default 50) steps
// are timed after 10 warm-up steps; ms/step is the slower rank's; both
// ranks must end with equal parameters. Run it with -test.benchtime 1x.
func BenchmarkDataParallelStep(b *testing.B) {
	dir := os.Getenv(EnvBenchDataset)
	if dir == "" {
		b.Skipf("set %s to a dataset directory", EnvBenchDataset)
	}
	if gpus, err := gputest.Count(); err != nil {
		b.Skip("no CUDA")
	} else if gpus < 2 {
		b.Skipf("needs 2 GPUs, found %d", gpus)
	}
	steps := 50
	if v, err := strconv.Atoi(os.Getenv("STRATA_DP_STEPS")); err == nil && v > 0 {
		steps = v
	}
	off := benchVariantsOff
	if v := os.Getenv("STRATA_DP_BENCH_VARIANTS"); v != "" {
		off = v
	}
	cfg := Config{Steps: steps, Warmup: 10, BatchSize: 1024, Hidden: 256, Layers: 3, Fanouts: []int{15, 10, 5}, Seed: 7}
	jobs := []struct {
		name, variants string
		env            []string
	}{
		{"p2p-off", off, []string{"NCCL_P2P_DISABLE=1"}},
		{"p2p-on", "nccl-p2p-on=nccl", nil},
	}
	if os.Getenv("STRATA_DP_BENCH_P2P_ON") == "0" {
		jobs = jobs[:1]
	}
	ms := map[string]float64{}
	for _, j := range jobs {
		b.Run(j.name, func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				env := append([]string{envDevice + "=cuda", envData + "=" + dir, envVariants + "=" + j.variants, "NCCL_NVLS_ENABLE=0"}, j.env...)
				res, labels, out, err := launchVariants(ctx, 2, cfg, env...)
				cancel()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, "gpushm trace") || strings.Contains(l, "failed") {
						b.Log(strings.TrimSpace(l))
					}
				}
				for _, k := range labels {
					r := res[k]
					if d := math.Abs(r[0].params - r[1].params); d > 1e-6*math.Abs(r[0].params)+1e-6 {
						b.Errorf("%s: ranks end with different parameters: %v vs %v", k, r[0].params, r[1].params)
					}
					worst := max(r[0].ms, r[1].ms)
					ms[k] = worst
					b.Logf("%s: rank 0 %.3f ms/step, rank 1 %.3f ms/step, %d gradient elements, losses %.4f %.4f, params %.9e; phases (us) rank 0: %s; rank 1: %s",
						k, r[0].ms, r[1].ms, r[0].elems, r[0].loss, r[1].loss, r[0].params, r[0].phases, r[1].phases)
					b.ReportMetric(worst, k+"_ms/step")
				}
			}
		})
	}
	mean := func(keys ...string) float64 {
		s, k := 0.0, 0
		for _, key := range keys {
			if v, ok := ms[key]; ok {
				s += v
				k++
			}
		}
		if k == 0 {
			return 0
		}
		return s / float64(k)
	}
	n := mean("nccl", "nccl-2")
	for _, g := range []struct{ name, label string }{{"gpushm", "gpushm (default: device path, synchronous)"}, {"gpushm-async", "gpushm asynchronous"},
		{"gpushm-pipe", "gpushm host pipeline"}, {"gpushm-legacy", "gpushm as on 2026-11-21"}} {
		v := mean(g.name, g.name+"-2")
		if v == 0 || n == 0 {
			continue
		}
		verdict := "at least as fast as NCCL"
		if v > n {
			verdict = fmt.Sprintf("%.1f%% slower than NCCL", 100*(v/n-1))
		} else {
			verdict += fmt.Sprintf(" (%.1f%% faster)", 100*(1-v/n))
		}
		fmt.Printf("verdict (NCCL_P2P_DISABLE=1): %s %.3f ms/step, nccl %.3f ms/step: %s (nccl with P2P on: %.3f ms/step)\n",
			g.label, v, n, verdict, ms["nccl-p2p-on"])
	}
}
