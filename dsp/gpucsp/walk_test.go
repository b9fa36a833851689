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

	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// ---- A host mirror of gpuWalkMachine: the node-wise mirror's buffers
// and routing, and every kernel of walk.cu in Go.

type hostWalkMachine struct {
	*hostMachine
	g      *graph.CSR // the patch
	lo, hi int64
	n      int64
	length int
	// corrupt, once: "walker" sends a walker to a rank that does not own
	// its node; "trace" sends a trace of a walk its origin does not have.
	corrupt string
}

func (m *hostWalkMachine) routeOrigins(hdr, sendIDs, pos, F, nFB, ctr backend.Buffer, fcap int64, hop, length int) error {
	saved := m.off
	m.off = make([]int64, m.P+1)
	for i := range m.off {
		m.off[i] = int64(i)
	}
	defer func() { m.off = saved }()
	return m.route(hdr, sendIDs, pos, F, nFB, ctr, fcap, 0, hop, length, walkHops)
}

// initWalks mirrors wk_init.
func (m *hostWalkMachine) initWalks(out, starts backend.Buffer, n int64, L int) error {
	if err := m.enter("initWalks", out, starts); err != nil {
		return err
	}
	s := int64(L + 1)
	for i := range n * s {
		i32s(out)[i] = -1
		if i%s == 0 {
			i32s(out)[i] = i32s(starts)[i/s]
		}
	}
	return nil
}

// pack mirrors wk_pack.
func (m *hostWalkMachine) pack(dst, src, pos backend.Buffer, n int64, w int) error {
	if err := m.enter("pack", dst, src, pos); err != nil {
		return err
	}
	W := int64(w)
	if int64(len(i64s(dst))) < n*W {
		return m.bad("pack: %d words for %d records of %d", len(i64s(dst)), n, w)
	}
	for j := range n {
		p := int64(i32s(pos)[j])
		copy(i64s(dst)[j*W:(j+1)*W], i64s(src)[p*W:(p+1)*W])
	}
	if m.corrupt == "walker" && n > 0 && w == walkWords {
		i64s(dst)[3] = m.lo - 1 // a node the receiver does not own (or -1)
		m.corrupt = ""
	}
	if m.corrupt == "trace" && n > 0 && w == traceWords {
		i64s(dst)[0] = 1 << 40
		m.corrupt = ""
	}
	return nil
}

// step mirrors wk_step.
func (m *hostWalkMachine) step(t int, recv backend.Buffer, R int64, rec, F, trO, trR, bad backend.Buffer) error {
	if err := m.enter("step", recv, rec, F, trO, trR, bad); err != nil {
		return err
	}
	in := i64s(recv)
	for j := range R {
		origin, idx, key, v := in[4*j], in[4*j+1], in[4*j+2], in[4*j+3]
		i32s(F)[j], i32s(trO)[j] = -1, -1
		if origin < 0 || origin >= int64(m.P) || idx < 0 || v < m.lo || v >= m.hi {
			i64s(bad)[0]++
			continue
		}
		a, d := m.g.Indptr[v], m.g.Indptr[v+1]-m.g.Indptr[v]
		if d == 0 {
			continue
		}
		u := m.g.Indices[a+int64(rng.Below(rng.Hash(uint64(key), uint64(t)), uint64(d)))]
		i32s(trO)[j] = int32(origin)
		copy(i64s(trR)[3*j:], []int64{idx, int64(t + 1), int64(u)})
		if t+1 < m.length {
			i32s(F)[j] = u
			copy(i64s(rec)[4*j:], []int64{origin, idx, key, int64(u)})
		}
	}
	return nil
}

func (m *hostWalkMachine) concat(dst backend.Buffer, srcs []backend.Buffer, n []int64) error {
	if err := m.enter("concat", append([]backend.Buffer{dst}, srcs...)...); err != nil {
		return err
	}
	at := 0
	for i, s := range srcs {
		h := s.(*hbuf)
		if h.dt == backend.Int32 {
			at += copy(i32s(dst)[at:], h.i32[:n[i]])
		} else {
			at += copy(i64s(dst)[at:], h.i64[:n[i]])
		}
	}
	return nil
}

// scatter mirrors wk_scatter.
func (m *hostWalkMachine) scatter(out, recv backend.Buffer, k, n int64, L int, bad backend.Buffer) error {
	if err := m.enter("scatter", out, recv, bad); err != nil {
		return err
	}
	for j := range k {
		idx, t, u := i64s(recv)[3*j], i64s(recv)[3*j+1], i64s(recv)[3*j+2]
		if idx < 0 || idx >= n || t < 1 || t > int64(L) || u < 0 || u >= m.n {
			i64s(bad)[0]++
			continue
		}
		i32s(out)[idx*int64(L+1)+t] = int32(u)
	}
	return nil
}

// hostWalkRanks are P walk protocol ranks over host machines.
type hostWalkRanks struct {
	p []*wproto
	m []*hostWalkMachine
}

func newHostWalkRanks(t *testing.T, g *graph.CSR, off []int64, length int) *hostWalkRanks {
	t.Helper()
	P := len(off) - 1
	b, err := book.New(off)
	if err != nil {
		t.Fatal(err)
	}
	hr := &hostWalkRanks{}
	grp := newHostGroup(P)
	for r := range P {
		patch, err := layout.Build(g, b, r, layout.Options{DeviceBytes: layout.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := b.Range(r)
		hm := &hostMachine{rank: r, P: P, off: b.Offsets(), edgeBase: patch.EdgeBase, shuffle: new(rng.Stream)}
		*hm.shuffle = rng.NewStream(uint64(17 + r))
		m := &hostWalkMachine{hostMachine: hm, g: patch.Graph, lo: lo, hi: hi, n: g.NumRows, length: length}
		st := &Stats{BytesSent: make([]int64, P), Frontier: make([]int64, max(length, 1))}
		p := &proto{m: m, rank: r, size: P, n: b.NumNodes(), off: b.Offsets(), rows: hi - lo, stats: st}
		if P > 1 {
			p.x, p.remote = hostComm{grp, r}, true
		} else {
			p.x = hostLocal{}
		}
		if p.ctl, err = m.alloc(backend.Int64, ctlLayout{P}.words()); err != nil {
			t.Fatal(err)
		}
		wp := &wproto{proto: p, wm: m, length: length}
		if wp.bad, err = m.alloc(backend.Int64, 1); err != nil {
			t.Fatal(err)
		}
		hr.p, hr.m = append(hr.p, wp), append(hr.m, m)
	}
	return hr
}

// walk runs one collective Walk on every rank; each rank's walks come
// back as host Walks, the buffer freed.
func (hr *hostWalkRanks) walk(ctx context.Context, starts [][]graph.NodeID, keys []sample.Key) ([]*sample.Walks, []error) {
	P := len(hr.p)
	out, errs := make([]*sample.Walks, P), make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			p := hr.p[r]
			b, err := p.walk(ctx, starts[r], keys[r])
			if err != nil {
				errs[r] = err
				return
			}
			out[r] = &sample.Walks{Length: p.length, Nodes: slices.Clone(i32s(b)[:len(starts[r])*(p.length+1)])}
			p.m.free(b)
		})
	}
	wg.Wait()
	return out, errs
}

func (hr *hostWalkRanks) check(t *testing.T, name string) {
	t.Helper()
	for r, m := range hr.m {
		if len(m.misuse) > 0 {
			t.Fatalf("%s: rank %d: %s", name, r, strings.Join(m.misuse, "; "))
		}
		if m.live != 2 {
			t.Fatalf("%s: rank %d holds %d buffers after the walk, want 2", name, r, m.live)
		}
	}
}

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
// GPUs run) on host mirrors of the kernels, on 1-4 ranks with equal and
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
				hr := newHostWalkRanks(t, g, off, L)
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
						before[r] = hr.p[r].stats.Waits
					}
					got, errs := hr.walk(ctx, starts, keys)
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
						if w := wantWalkWaits(L, P > 1); hr.p[r].stats.Waits-before[r] != w {
							t.Errorf("%s rank %d: %d host waits, want %d", name, r, hr.p[r].stats.Waits-before[r], w)
						}
					}
					hr.check(t, name)
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
			hr := newHostWalkRanks(t, g, off, L)
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
				hr.m[0].corrupt = "walker"
			case c.op == "corrupt:trace":
				// Rank 2 sends a trace of walk 2^40 home first: its origin
				// (the first rank it sends traces to) fails alone.
				hr.m[2].corrupt = "trace"
				bad = -1
			default:
				hr.m[c.rank].failAt = map[string]int{c.op: c.call}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := hr.walk(ctx, starts, keys)
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
			hr.check(t, c.name)
			starts[c.rank] = good(c.rank)
			if _, errs := hr.walk(ctx, starts, keys); errors.Join(errs...) != nil {
				t.Fatalf("after a failed walk: %v", errors.Join(errs...))
			}
			hr.check(t, c.name+", next walk")
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
	} {
		_, err := NewWalker(nil, c.patch, c.off, nil, c.length, c.pl)
		var ge *Error
		if !errors.Is(err, ErrInput) || !errors.As(err, &ge) || ge.Op != "gpucsp.NewWalker" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput mentioning %q", c.name, err, c.want)
		}
	}
}

// TestWalkKernelsCompile compiles the walk kernels with the node-wise
// ones they share a module with (no GPU needed).
func TestWalkKernelsCompile(t *testing.T) {
	testkit.CompileCUDA(t, cuda.CommonSource()+kernelSrc+walkSrc, "gpucsp-walk.cu")
}
