package dpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/devdist"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/builtin"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
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
)

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
		dev, err := cuda.Open(lr, cuda.Options{})
		if err != nil {
			return err
		}
		defer dev.Close()
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
	c, info, err := devdist.Init(ctx, be, devdist.Options{Backend: os.Getenv(envComm)})
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := Run(ctx, be, c, src, Data{Train: ds.Train, Labels: ds.Labels, FeatDim: ds.FeatDim, Classes: ds.NumClasses}, cfg)
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
	var blocks []*nn.Block
	release := func() {
		for _, k := range blocks {
			k.Free()
		}
	}
	for i := range mb.Blocks {
		k, err := nn.UploadBlock(h.b, &mb.Blocks[i])
		if err != nil {
			release()
			return nil, nil, nil, err
		}
		blocks = append(blocks, k)
	}
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

var resultLine = regexp.MustCompile(`rank (\d+): dpstep kind=(\S+) size=(\d+) steps=(\d+) ms/step=([0-9.]+) grad_elems=(\d+) loss=([0-9.eE+-]+) params=([0-9.eE+-]+)`)

type rankResult struct {
	kind   string
	ms     float64
	params float64
	loss   float64
	elems  int
}

// launchJob runs n ranks and returns their results by rank.
func launchJob(ctx context.Context, n int, cfg Config, env ...string) ([]rankResult, string, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", err
	}
	var out strings.Builder
	_, err = launch.Run(ctx, launch.Config{N: n, Command: commtest.Command(),
		Env:    append([]string{commtest.RoleEnv + "=rank", envConfig + "=" + string(js)}, env...),
		Stdout: &out, Stderr: &out, Prefix: true})
	s := out.String()
	if err != nil {
		return nil, s, err
	}
	res := make([]rankResult, n)
	seen := 0
	for _, m := range resultLine.FindAllStringSubmatch(s, -1) {
		r, _ := strconv.Atoi(m[1])
		if r < 0 || r >= n {
			return nil, s, fmt.Errorf("result of rank %d in a job of %d", r, n)
		}
		ms, _ := strconv.ParseFloat(m[5], 64)
		el, _ := strconv.Atoi(m[6])
		loss, _ := strconv.ParseFloat(m[7], 64)
		p, _ := strconv.ParseFloat(m[8], 64)
		res[r] = rankResult{kind: m[2], ms: ms, elems: el, loss: loss, params: p}
		seen++
	}
	if seen != n {
		return nil, s, fmt.Errorf("%d of %d ranks reported a result", seen, n)
	}
	return res, s, nil
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

// BenchmarkDataParallelStep times a data-parallel training step of
// 3-layer GraphSAGE (hidden 256, batch 1024 per GPU, fanouts [15, 10, 5],
// Adam) on the dataset in $STRATA_BENCH_DATASET with one process per GPU
// on 2 GPUs: NCCL and GPU shared memory with NCCL_P2P_DISABLE=1, and
// NCCL with P2P on. $STRATA_DP_STEPS (default 50) steps are timed after
// 10 warm-up steps; ms/step is the slower rank's. Run it with
// -test.benchtime 1x (every iteration starts a job).
func BenchmarkDataParallelStep(b *testing.B) {
	dir := os.Getenv(EnvBenchDataset)
	if dir == "" {
		b.Skipf("set %s to a dataset directory", EnvBenchDataset)
	}
	if cu.Load() != nil {
		b.Skip("no CUDA")
	}
	if n, _ := cu.DeviceCount(); n < 2 {
		b.Skipf("needs 2 GPUs, found %d", n)
	}
	steps := 50
	if v, err := strconv.Atoi(os.Getenv("STRATA_DP_STEPS")); err == nil && v > 0 {
		steps = v
	}
	cfg := Config{Steps: steps, Warmup: 10, BatchSize: 1024, Hidden: 256, Layers: 3, Fanouts: []int{15, 10, 5}, Seed: 7}
	cases := []struct {
		name, comm string
		env        []string
	}{
		{"nccl-p2p-off", "nccl", []string{"NCCL_P2P_DISABLE=1"}},
		{"gpushm-p2p-off", "gpushm", []string{"NCCL_P2P_DISABLE=1"}},
		{"nccl-p2p-on", "nccl", nil},
	}
	ms := map[string]float64{}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var worst float64
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
				env := append([]string{envDevice + "=cuda", envComm + "=" + c.comm, envData + "=" + dir, "NCCL_NVLS_ENABLE=0"}, c.env...)
				res, out, err := launchJob(ctx, 2, cfg, env...)
				cancel()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				if res[0].kind != c.comm {
					b.Fatalf("opened %s, want %s", res[0].kind, c.comm)
				}
				if d := math.Abs(res[0].params - res[1].params); d > 1e-6*math.Abs(res[0].params)+1e-6 {
					b.Errorf("ranks end with different parameters: %v vs %v", res[0].params, res[1].params)
				}
				worst = max(res[0].ms, res[1].ms)
				b.Logf("%s: rank 0 %.3f ms/step, rank 1 %.3f ms/step, %d gradient elements, losses %.4f %.4f",
					c.name, res[0].ms, res[1].ms, res[0].elems, res[0].loss, res[1].loss)
			}
			ms[c.name] = worst
			b.ReportMetric(worst, "ms/step")
		})
	}
	g, n := ms["gpushm-p2p-off"], ms["nccl-p2p-off"]
	if g > 0 && n > 0 {
		verdict := "gpushm is at least as fast as NCCL"
		if g > n {
			verdict = fmt.Sprintf("gpushm is %.1f%% slower than NCCL", 100*(g/n-1))
		}
		fmt.Printf("verdict (NCCL_P2P_DISABLE=1): gpushm %.3f ms/step, nccl %.3f ms/step: %s (nccl with P2P on: %.3f ms/step)\n",
			g, n, verdict, ms["nccl-p2p-on"])
	}
}
