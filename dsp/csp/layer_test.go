package csp

import (
	"context"
	"errors"
	"fmt"
	"github.com/strata-gnn/strata/internal/rng"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// wantLayerWaits is the host waits of one layer-wise step: per hop the
// reads of the header, the frontier's degrees and the allocation headers,
// and with a communicator the header, node, degree, allocation and answer
// exchanges (plus the edge IDs'); one read of every block's sizes.
func wantLayerWaits(L int, remote, edgeIDs bool) int64 {
	colls := int64(5)
	if edgeIDs {
		colls++
	}
	if !remote {
		colls = 0
	}
	return 1 + int64(L)*(3+colls)
}

// layerRef is layer-wise sampling on one device, written plainly from
// its rules (the package doc): per hop, LayerAllocate splits the layer's
// budget over the frontier by degree (or row weight), then frontier node
// v draws its count from its row with the stream of (key, hop, v):
// weighted and uniform draws with replacement in draw order, uniform
// ones without replacement by Floyd's algorithm in row order. It shares
// no code with the protocol or the machines: the tests' reference.
type layerRef struct {
	g   *graph.CSR
	cfg Config
}

// refLayer samples seeds for key with layerRef over g.
func refLayer(t testing.TB, g *graph.CSR, cfg Config, seeds []graph.NodeID, key sample.Key) *sample.MiniBatch {
	t.Helper()
	mb, err := sample.NewBlockSampler(&layerRef{g: g, cfg: cfg}).Sample(seeds, key)
	if err != nil {
		t.Fatal(err)
	}
	return mb
}

func (s *layerRef) NumNodes() int64 { return s.g.NumRows }
func (s *layerRef) NumHops() int    { return len(s.cfg.Fanouts) }

func (s *layerRef) SampleHop(dst []graph.NodeID, hop int, key sample.Key) (*sample.Neighbors, error) {
	g := s.g
	deg, wt := make([]int64, len(dst)), make([]float64, len(dst))
	for i, v := range dst {
		deg[i] = g.Degree(v)
		wt[i] = float64(deg[i])
		if s.cfg.Weighted {
			wt[i] = 0
			for _, w := range g.Weights[g.Indptr[v]:g.Indptr[v+1]] {
				wt[i] += float64(w)
			}
		}
	}
	alloc := LayerAllocate(s.cfg.Fanouts[hop], s.cfg.Replace, key, hop, deg, wt)
	nodeKey := rng.Derive(key.Seed, tagLayerNode, uint64(key.Epoch), uint64(key.Batch), uint64(hop))
	nb := &sample.Neighbors{Indptr: make([]int64, len(dst)+1)}
	for i, v := range dst {
		a, b := g.Indptr[v], g.Indptr[v+1]
		st := rng.NewStream(rng.Derive(nodeKey, uint64(v)))
		emit := func(pos int64) {
			nb.Nodes = append(nb.Nodes, g.Indices[a+pos])
			nb.EdgeIDs = append(nb.EdgeIDs, a+pos)
		}
		k := alloc[i]
		switch {
		case k == 0:
		case s.cfg.Weighted:
			var cum []float64
			var sum float64
			for _, w := range g.Weights[a:b] {
				sum += float64(w)
				cum = append(cum, sum)
			}
			for range k {
				u := (1 - st.OpenFloat64()) * sum
				j := sort.Search(len(cum), func(j int) bool { return cum[j] > u })
				for j == len(cum) || g.Weights[a+int64(j)] == 0 { // the last positive weight
					j--
				}
				emit(int64(j))
			}
		case s.cfg.Replace:
			for range k {
				emit(int64(st.Below(uint64(b - a))))
			}
		default:
			chosen := map[int64]bool{}
			for j := b - a - k; j < b-a; j++ {
				t := int64(st.Below(uint64(j + 1)))
				if chosen[t] {
					t = j
				}
				chosen[t] = true
			}
			for pos := range b - a {
				if chosen[pos] {
					emit(pos)
				}
			}
		}
		nb.Indptr[i+1] = int64(len(nb.Nodes))
	}
	return nb, nil
}

// checkLayerBatch verifies that every edge of a layer-wise batch exists,
// leads where its block says, has a positive weight when weighted and is
// drawn once without replacement, and that each layer has the number of
// edges the config asks for.
func checkLayerBatch(t *testing.T, g *graph.CSR, cfg Config, mb *sample.MiniBatch) {
	t.Helper()
	hops := len(mb.Blocks)
	for h := range hops {
		blk := &mb.Blocks[hops-1-h] // hop h builds block hops-1-h
		var frontierEdges int64
		var positive bool
		for i := 0; i < blk.NumDst; i++ {
			v := blk.SrcNodes[i]
			frontierEdges += g.Degree(v)
			for _, w := range g.Weights[g.Indptr[v]:g.Indptr[v+1]] {
				positive = positive || w > 0
			}
			seen := map[int64]bool{}
			for e := blk.Indptr[i]; e < blk.Indptr[i+1]; e++ {
				eid := blk.EdgeIDs[e]
				if eid < g.Indptr[v] || eid >= g.Indptr[v+1] || g.Indices[eid] != blk.SrcNodes[blk.Indices[e]] {
					t.Fatalf("hop %d: edge %d of row %d leads to %d", h, eid, v, blk.SrcNodes[blk.Indices[e]])
				}
				if cfg.Weighted && g.Weights[eid] == 0 || !cfg.Replace && seen[eid] {
					t.Fatalf("hop %d: edge %d drawn with weight 0 or twice without replacement", h, eid)
				}
				seen[eid] = true
			}
		}
		f := int64(cfg.Fanouts[h])
		want := f
		switch {
		case f < 0:
			want = frontierEdges
		case !cfg.Replace:
			want = min(f, frontierEdges)
		case frontierEdges == 0 || (cfg.Weighted && !positive):
			want = 0
		}
		if got := int64(blk.NumEdges()); got != want {
			t.Fatalf("hop %d: %d edges, want %d (fanout %d, frontier of %d edges)", h, got, want, f, frontierEdges)
		}
	}
}

// TestLayerAllocationLaw: with replacement, a frontier node receives each
// draw with probability degree/sum(degrees); over many batches on two
// ranks the mean allotment of every seed is within 5 standard errors of
// that.
func TestLayerAllocationLaw(t *testing.T) {
	g := randomGraph(12, 200, 6)
	seeds := randomSeeds(7, g.NumRows, 12)
	var sum int64
	for _, v := range seeds {
		sum += g.Degree(v)
	}
	const f, trials = 30, 300
	ss, _ := cpuLayerGroup(t, g, []int64{0, 90, g.NumRows}, Config{Fanouts: []int{f}, Replace: true}, nil)
	ctx := context.Background()
	counts := make([]float64, len(seeds))
	for i := range trials {
		got, errs := layerSampleAll(ctx, ss, [][]graph.NodeID{seeds, nil}, []sample.Key{{Seed: 1, Batch: i}, {Seed: 1, Batch: i}})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		blk := &got[0].Blocks[0]
		for j := range seeds {
			counts[j] += float64(blk.Indptr[j+1] - blk.Indptr[j])
		}
	}
	for j, v := range seeds {
		p := float64(g.Degree(v)) / float64(sum)
		mean := counts[j] / trials
		se := math.Sqrt(f*p*(1-p)/trials) + 1e-9
		if d := mean - f*p; math.Abs(d) > 5*se {
			t.Errorf("seed %d (degree %d): mean allotment %.3f, want %.3f +- %.3f", v, g.Degree(v), mean, f*p, 5*se)
		}
	}
}

var layerModes = []Config{
	{Fanouts: []int{40, 60}, Replace: true},
	{Fanouts: []int{40, 60}, EdgeIDs: true},
	{Fanouts: []int{30, 50, 20}, Replace: true, Weighted: true, EdgeIDs: true},
	{Fanouts: []int{-1, 25}, Replace: true},
	{Fanouts: []int{-1, 30}},
	{Fanouts: []int{5000, 7}}, // a budget above the frontier's edges takes them all
	{Fanouts: []int{400, 9}, Replace: true, Weighted: true},
	// (Weighted with fanout -1 draws every edge's count with replacement;
	// csp refuses it as soon as a frontier node has edges of weight 0.)
}

// TestLayerProtocolMatchesCPU runs the layer-wise protocol (lproto, the
// code GPUs run) on the CPU machines of 1-4 CPU back ends with random
// delays before every collective, with equal and random partitions
// (empty ranks and ranks without seeds included), and compares every
// rank's batch with the single-device reference's (layerRef), for two
// steps in a row. It also counts the host's waits.
func TestLayerProtocolMatchesCPU(t *testing.T) {
	g := randomGraph(6, 1500, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for mi, mode := range layerModes {
		for P := 1; P <= 4; P++ {
			trials := 2
			if testing.Short() && P == 3 {
				trials = 1
			}
			for trial := range trials {
				off := randomOffsets(uint64(20*P+trial), g.NumRows, P)
				if trial == 0 {
					off = make([]int64, P+1)
					for p := range off {
						off[p] = g.NumRows * int64(p) / int64(P)
					}
				}
				ss, ms := cpuLayerGroup(t, g, off, mode, pipeline.RandomDelays(uint64(mi*100+P*10+trial), 300*time.Microsecond, 0.3))
				for stepNo := range 2 {
					seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						n := []int{40, 0, 120, 1}[(r+trial+stepNo)%4]
						seeds[r] = randomSeeds(uint64(300*P+10*trial+r+1000*stepNo), g.NumRows, n)
						keys[r] = sample.Key{Seed: 12, Epoch: trial, Batch: r + 10*stepNo}
					}
					before := make([]int64, P)
					for r := range P {
						before[r] = ss[r].Stats().Waits
					}
					got, errs := layerSampleAll(ctx, ss, seeds, keys)
					name := fmt.Sprintf("%+v P=%d offsets %v step %d", mode, P, off, stepNo)
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for r := range P {
						want := refLayer(t, g, mode, seeds[r], keys[r])
						checkLayerBatch(t, g, mode, want)
						if !mode.EdgeIDs {
							for i := range got[r].Blocks {
								for _, e := range got[r].Blocks[i].EdgeIDs {
									if e != -1 {
										t.Fatalf("%s rank %d: edge ID %d without EdgeIDs", name, r, e)
									}
								}
								got[r].Blocks[i].EdgeIDs = want.Blocks[i].EdgeIDs
							}
						}
						if !slices.Equal(got[r].Seeds, want.Seeds) {
							t.Fatalf("%s rank %d: seeds differ", name, r)
						}
						compareBlocks(t, fmt.Sprintf("%s rank %d", name, r), got[r].Blocks, want.Blocks)
						if w := wantLayerWaits(len(mode.Fanouts), P > 1, mode.EdgeIDs); ss[r].Stats().Waits-before[r] != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, ss[r].Stats().Waits-before[r], w)
						}
					}
					checkMachines(t, name, ms, 2)
				}
			}
		}
	}
}

// TestLayerProtocolFailures: bad seeds, a failure before a hop's header
// (routing, the previous hop's tail) and a requester's failure while
// allotting its layer (an impossible degree answer) make every rank fail
// at the same hop without waiting for a deadline, the failing rank with
// its own error; an owner asked for more than its allocation says fails
// with the requester at the step's end (ErrProtocol on both). The group
// samples normally afterwards.
func TestLayerProtocolFailures(t *testing.T) {
	g := randomGraph(7, 1200, 6)
	P := 3
	off := []int64{0, 400, 800, 1200}
	good := func(r int) []graph.NodeID { return ownedSeeds(uint64(r+5), off, r, 30) }
	for _, c := range []struct {
		name    string
		rank    int
		op      string // injected failure (op, call), "corrupt:..." or bad seeds when ""
		call    int
		selfHop int
		peerHop int // -1: the other ranks succeed (or fail as owners, see owner)
		want    error
	}{
		{"bad seeds", 1, "", 0, 0, 0, ErrInput},
		{"routing", 2, "route", 2, 1, 1, nil},
		{"relabel carried to the next header", 0, "relabel", 1, 0, 1, nil},
		{"allocation", 1, "corrupt:owner", 0, 0, 0, ErrProtocol},
		// Hop 0's frontier is the seeds, which rank 0 owns: it asks itself,
		// and fails alone when it reads its violation counters.
		{"owner asked too much", 0, "corrupt:count", 0, 0, -1, ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			ss, ms := cpuLayerGroup(t, g, off, Config{Fanouts: []int{20, 30, 10}}, nil)
			seeds, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				seeds[r], keys[r] = good(r), sample.Key{Seed: 8, Batch: r}
			}
			switch {
			case c.op == "":
				seeds[c.rank] = append(slices.Clone(seeds[c.rank]), seeds[c.rank][0])
			case strings.HasPrefix(c.op, "corrupt:"):
				ms[c.rank].corrupt = strings.TrimPrefix(c.op, "corrupt:")
			default:
				ms[c.rank].failAt = map[string]int{c.op: c.call}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := layerSampleAll(ctx, ss, seeds, keys)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("failing took %v: the ranks waited for a deadline", d)
			}
			checkFailedStep(t, errs, c.rank, c.selfHop, c.peerHop, c.want)
			checkMachines(t, c.name, ms, 2)
			seeds[c.rank] = good(c.rank)
			if _, errs := layerSampleAll(ctx, ss, seeds, keys); errors.Join(errs...) != nil {
				t.Fatalf("after a failed step: %v", errors.Join(errs...))
			}
			checkMachines(t, c.name+", next step", ms, 2)
		})
	}
}

// TestNewLayerValidates: NewLayer checks the patch, offsets and the
// layer-wise configuration before it touches the device.
func TestNewLayerValidates(t *testing.T) {
	g := randomGraph(2, 100, 4)
	off := []int64{0, 100}
	b, _ := book.New(off)
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	noW := *p
	gw := *p.Graph
	gw.Weights = nil
	noW.Graph = &gw
	negW := *p
	gn := *p.Graph
	gn.Weights = slices.Clone(gn.Weights)
	gn.Weights[3] = -1
	negW.Graph = &gn
	ok := Config{Fanouts: []int{30, 20}}
	for _, c := range []struct {
		name  string
		patch *layout.Patch
		off   []int64
		cfg   Config
		want  string
	}{
		{"nil patch", nil, off, ok, "nil patch"},
		{"bad offsets", p, []int64{0, 50, 40}, ok, "offsets"},
		{"parts vs ranks", p, []int64{0, 40, 100}, ok, "2 parts in the offsets but the communicator has 1 ranks"},
		{"no fanouts", p, off, Config{}, "0 fanouts"},
		{"zero fanout", p, off, Config{Fanouts: []int{3, 0}}, "fanout 0 of hop 1"},
		{"huge fanout", p, off, Config{Fanouts: []int{1 << 25}}, "fanout 33554432 of hop 0"},
		{"weighted without replacement", p, off, Config{Fanouts: []int{3}, Weighted: true}, "with replacement only"},
		{"no weights", &noW, off, Config{Fanouts: []int{3}, Weighted: true, Replace: true}, "needs edge weights"},
		{"negative weight", &negW, off, Config{Fanouts: []int{3}, Weighted: true, Replace: true}, "edge 3 of the patch has weight -1"},
		{"nil device", p, off, ok, "nil device"},
		{"other back end", p, off, ok, "back end other (csp.otherBackend): want the CPU back end or a device with run-time kernels"},
	} {
		var be backend.Backend
		if c.name == "other back end" {
			be = otherBackend{}
		}
		_, err := NewLayer(be, c.patch, c.off, nil, c.cfg)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "csp.NewLayer" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
