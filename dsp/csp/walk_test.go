package csp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/dsp/pipeline"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// wantWalkWaits is the host waits of one walk: per step the header's
// exchange and read and the walkers' exchange; then a read of the
// violation counter, the traces' header exchange and read and their
// exchange, and a last read of the counter. A walk of length 0 only
// exchanges and reads its first header.
func wantWalkWaits(L int, remote bool) int64 {
	if L == 0 {
		if remote {
			return 2
		}
		return 1
	}
	if remote {
		return int64(3*L + 5)
	}
	return int64(L + 3)
}

// TestWalkProtocolMatchesCPU runs the walk protocol (wproto, the code
// GPUs run) on the CPU machines of 1-4 CPU back ends with random delays
// before every collective, with equal and
// random partitions (empty ranks, ranks without starts, repeated starts,
// dead ends), and compares every rank's walks with sample.RandomWalk's
// over the whole graph, twice in a row; it also counts the host's waits.
func TestWalkProtocolMatchesCPU(t *testing.T) {
	g := randomGraph(8, 1000, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, L := range []int{0, 1, 5, 12} {
		for P := 1; P <= 4; P++ {
			for trial := range 2 {
				off := randomOffsets(uint64(30*P+trial), g.NumRows, P)
				if trial == 0 {
					off = make([]int64, P+1)
					for p := range off {
						off[p] = g.NumRows * int64(p) / int64(P)
					}
				}
				ws, ms := cpuWalkGroup(t, g, off, L, pipeline.RandomDelays(uint64(L*100+P*10+trial), 300*time.Microsecond, 0.3))
				for round := range 2 {
					starts, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
					for r := range P {
						k := []int{50, 0, 130, 1}[(r+trial+round)%4]
						starts[r] = randomSeeds(uint64(500*P+10*trial+r+1000*round), g.NumRows, k)
						if k > 2 {
							starts[r] = append(starts[r], starts[r][0], starts[r][1]) // repeats walk independently
						}
						keys[r] = sample.Key{Seed: 21, Epoch: trial, Batch: r + 10*round}
					}
					before := make([]int64, P)
					for r := range P {
						before[r] = ws[r].Stats().Waits
					}
					got, errs := walkAll(ctx, ws, starts, keys)
					name := fmt.Sprintf("L=%d P=%d offsets %v round %d", L, P, off, round)
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for r := range P {
						want, err := sample.RandomWalk(g, starts[r], L, keys[r])
						if err != nil {
							t.Fatal(err)
						}
						if got[r].Length != L || !slices.Equal(got[r].Nodes, want.Nodes) {
							t.Fatalf("%s rank %d: walks differ:\n got %v\nwant %v", name, r, trim(got[r].Nodes), trim(want.Nodes))
						}
						if w := wantWalkWaits(L, P > 1); ws[r].Stats().Waits-before[r] != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, ws[r].Stats().Waits-before[r], w)
						}
					}
					checkMachines(t, name, ms, 2)
				}
			}
		}
	}
}

// TestWalkProtocolFailures: a bad start, a failure before a step's
// header (routing), a failing step (carried to the next header, or to
// the traces' header after the last step) and a walker a rank may not
// step (a protocol violation, reported in the traces' header) make every
// rank fail at the same step without waiting for a deadline, the
// failing rank with its own error; a trace its origin cannot take fails
// that rank alone. The group walks normally afterwards.
func TestWalkProtocolFailures(t *testing.T) {
	g := randomGraph(9, 900, 5)
	P, L := 3, 4
	off := []int64{0, 300, 600, 900}
	good := func(r int) []graph.NodeID { return ownedSeeds(uint64(r+3), off, r, 40) }
	for _, c := range []struct {
		name    string
		rank    int
		op      string // injected failure (op, call), "corrupt:..." or a bad start when ""
		call    int
		selfHop int
		peerHop int // -1: the other ranks succeed
		want    error
	}{
		{"bad start", 1, "", 0, 0, 0, ErrInput},
		{"routing", 2, "route", 2, 1, 1, nil},
		{"step carried", 0, "step", 2, 1, 2, nil},
		{"last step carried to the traces", 1, "step", 4, 3, L, nil},
		{"walker not the owner's", 0, "corrupt:walker", 0, L, L, ErrProtocol},
		{"trace not the origin's", 2, "corrupt:trace", 0, L, -1, ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws, ms := cpuWalkGroup(t, g, off, L, nil)
			starts, keys := make([][]graph.NodeID, P), make([]sample.Key, P)
			for r := range P {
				starts[r], keys[r] = good(r), sample.Key{Seed: 2, Batch: r}
			}
			bad := c.rank
			switch {
			case c.op == "":
				starts[c.rank] = append(slices.Clone(starts[c.rank]), graph.NodeID(g.NumRows))
			case c.op == "corrupt:walker":
				// Rank 0's first walker goes to rank 0 itself (its starts
				// are its own) carrying node -1: rank 0 detects it.
				ms[0].corrupt = "walker"
			case c.op == "corrupt:trace":
				// Rank 2 sends a trace of walk 2^40 home first: its origin
				// (the first rank it sends traces to) fails alone.
				ms[2].corrupt = "trace"
				bad = -1
			default:
				ms[c.rank].failAt = map[string]int{c.op: c.call}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := walkAll(ctx, ws, starts, keys)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("failing took %v: the ranks waited for a deadline", d)
			}
			failed := 0
			for r, err := range errs {
				var ge *Error
				switch {
				case bad < 0:
					// Only the trace's origin fails, with ErrProtocol.
					if err != nil {
						failed++
						if !errors.Is(err, ErrProtocol) || !errors.As(err, &ge) || ge.Rank != r || ge.Hop != L {
							t.Errorf("rank %d: %v, want ErrProtocol at hop %d", r, err, L)
						}
					}
				case r == bad:
					if err == nil || !errors.As(err, &ge) || ge.Rank != r || ge.Hop != c.selfHop || errors.Is(err, ErrPeer) ||
						(c.want != nil && !errors.Is(err, c.want)) {
						t.Errorf("failing rank %d: %v, want its own error at hop %d", r, err, c.selfHop)
					}
				default:
					if !errors.Is(err, ErrPeer) || !errors.As(err, &ge) || ge.Rank != r || ge.Hop != c.peerHop ||
						!strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", bad)) {
						t.Errorf("rank %d: %v, want ErrPeer naming rank %d at hop %d", r, err, bad, c.peerHop)
					}
				}
			}
			if bad < 0 && failed != 1 {
				t.Errorf("%d ranks failed, want the trace's origin alone", failed)
			}
			checkMachines(t, c.name, ms, 2)
			starts[c.rank] = good(c.rank)
			if _, errs := walkAll(ctx, ws, starts, keys); errors.Join(errs...) != nil {
				t.Fatalf("after a failed walk: %v", errors.Join(errs...))
			}
			checkMachines(t, c.name+", next walk", ms, 2)
		})
	}
}

// TestNewWalkerValidates: NewWalker checks the patch, offsets, length
// and placement before it touches the device.
func TestNewWalkerValidates(t *testing.T) {
	g := randomGraph(2, 100, 4)
	off := []int64{0, 100}
	b, _ := book.New(off)
	p, err := layout.Build(g, b, 0, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		patch  *layout.Patch
		off    []int64
		length int
		pl     gpusample.Placement
		want   string
	}{
		{"nil patch", nil, off, 3, gpusample.OnDevice, "nil patch"},
		{"parts vs ranks", p, []int64{0, 40, 100}, 3, gpusample.OnDevice, "2 parts in the offsets"},
		{"negative length", p, off, -1, gpusample.OnDevice, "length -1 not in [0, 65536]"},
		{"long", p, off, 1 << 17, gpusample.OnDevice, "length 131072"},
		{"placement", p, off, 3, gpusample.Placement(9), "unknown placement 9"},
		{"nil device", p, off, 3, gpusample.OnDevice, "nil device"},
		{"other back end", p, off, 3, gpusample.OnDevice, "back end other (csp.otherBackend): want the CPU back end or a device with run-time kernels"},
	} {
		var be backend.Backend
		if c.name == "other back end" {
			be = otherBackend{}
		}
		_, err := NewWalker(be, c.patch, c.off, nil, c.length, c.pl)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "csp.NewWalker" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}
