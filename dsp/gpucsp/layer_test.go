package gpucsp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/csp"
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

// cpuLayer samples with csp.LayerSampler on P in-process ranks over the
// partition off (P = 1: the single-device reference), one batch per rank.
func cpuLayer(t *testing.T, g *graph.CSR, off []int64, cfg Config, seeds [][]graph.NodeID, keys []sample.Key) []*sample.MiniBatch {
	t.Helper()
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := inproc.New(P, comm.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out, errs := make([]*sample.MiniBatch, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			patch, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
			if err != nil {
				errs[r] = err
				return
			}
			s, err := csp.NewLayerSampler(cs[r], b, patch, csp.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted}, nil)
			if err != nil {
				errs[r] = err
				return
			}
			out[r], errs[r] = s.Sample(seeds[r], keys[r])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
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
// rank's batch with csp.LayerSampler's: on the same partition, and alone
// on one rank (the single-device reference), for two steps in a row. It
// also counts the host's waits.
func TestLayerProtocolMatchesCPU(t *testing.T) {
	g := randomGraph(6, 1500, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one := []int64{0, g.NumRows}
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
					var same []*sample.MiniBatch
					if trial == 0 && P > 1 {
						same = cpuLayer(t, g, off, mode, seeds, keys)
					}
					for r := range P {
						want := cpuLayer(t, g, one, mode, seeds[r:r+1], keys[r:r+1])[0]
						if same != nil && !sameMiniBatch(same[r], want) {
							t.Fatalf("%s rank %d: csp.LayerSampler differs between 1 and %d ranks", name, r, P)
						}
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

func sameMiniBatch(a, b *sample.MiniBatch) bool {
	if !slices.Equal(a.Seeds, b.Seeds) || len(a.Blocks) != len(b.Blocks) {
		return false
	}
	for i := range a.Blocks {
		x, y := a.Blocks[i], b.Blocks[i]
		if x.NumDst != y.NumDst || !slices.Equal(x.SrcNodes, y.SrcNodes) || !slices.Equal(x.Indptr, y.Indptr) ||
			!slices.Equal(x.Indices, y.Indices) || !slices.Equal(x.EdgeIDs, y.EdgeIDs) {
			return false
		}
	}
	return true
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
		{"other back end", p, off, ok, "back end other (gpucsp.otherBackend): want a CUDA device or the CPU back end"},
	} {
		var be backend.Backend
		if c.name == "other back end" {
			be = otherBackend{}
		}
		_, err := NewLayer(be, c.patch, c.off, nil, c.cfg)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "gpucsp.NewLayer" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
