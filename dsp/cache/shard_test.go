package cache

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// tableSource serves rows of a whole table and records what it was asked.
type tableSource struct {
	x     []float32
	cols  int
	asked [][]int32
	fail  error
}

func (t *tableSource) Gather(ids []int32, out []float32) error {
	t.asked = append(t.asked, slices.Clone(ids))
	if t.fail != nil {
		return t.fail
	}
	for i, v := range ids {
		copy(out[i*t.cols:(i+1)*t.cols], t.x[int(v)*t.cols:(int(v)+1)*t.cols])
	}
	return nil
}

func shardTable(rows, cols int) []float32 {
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i)*0.5 - 7
	}
	return x
}

// hostShardStore returns the CPU shard store of rows [lo, hi) of the
// rows x cols table x (hot rows cached, notionally), whose source serves x.
func hostShardStore(t *testing.T, x []float32, rows, cols, lo, hi, hot int) (*cpu.Backend, *ShardStore, *tableSource) {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	own := make([]graph.NodeID, hot)
	for i := range own {
		own[i] = graph.NodeID(lo + i)
	}
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, &ShardCache{Own: own})
	if err != nil {
		t.Fatal(err)
	}
	src := &tableSource{x: x, cols: cols}
	s, err := NewShardStore(b, m, src, rows, cols, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	return b, s, src
}

func TestShardStoreRowsEqualTable(t *testing.T) {
	const rows, cols, lo, hi = 40, 3, 10, 25
	x := shardTable(rows, cols)
	_, s, src := hostShardStore(t, x, rows, cols, lo, hi, 4)
	// Local rows, remote rows on both sides, repeats, the shard's edges.
	ids := []int32{10, 3, 24, 39, 3, 25, 9, 12, 39, 0, 10}
	nodes, dst := cpu.WrapI32(ids), cpu.WrapF32(make([]float32, len(ids)*cols))
	if err := s.Gather(dst, nodes); err != nil {
		t.Fatal(err)
	}
	got := cpu.F32(dst)
	for i, v := range ids {
		for c := range cols {
			if w := x[int(v)*cols+c]; got[i*cols+c] != w {
				t.Fatalf("row %d (node %d) col %d: %v, want %v", i, v, c, got[i*cols+c], w)
			}
		}
	}
	// One request per batch, each remote node once, in first-seen order.
	if want := [][]int32{{3, 39, 25, 9, 0}}; fmt.Sprint(src.asked) != fmt.Sprint(want) {
		t.Fatalf("asked %v, want %v", src.asked, want)
	}
	// A batch of local rows asks for nothing.
	src.asked = nil
	if err := s.Gather(cpu.WrapF32(make([]float32, 2*cols)), cpu.WrapI32([]int32{11, 24})); err != nil || src.asked != nil {
		t.Fatalf("local batch: %v, asked %v", err, src.asked)
	}
	if s.HotRows() != 4 || s.DeviceBytes() != 4*4*cols {
		t.Fatalf("hot rows %d, device bytes %d", s.HotRows(), s.DeviceBytes())
	}
}

func TestShardStoreRefusals(t *testing.T) {
	const rows, cols, lo, hi = 20, 2, 5, 10
	x := shardTable(rows, cols)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &tableSource{x: x, cols: cols}
	s, err := NewShardStore(b, m, src, rows, cols, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int32{-1, 20} {
		err := s.Gather(cpu.WrapF32(make([]float32, 2*cols)), cpu.WrapI32([]int32{6, bad}))
		if !errors.Is(err, ErrInput) || src.asked != nil {
			t.Fatalf("node %d: %v (asked %v)", bad, err, src.asked)
		}
	}
	if err := s.Gather(cpu.WrapF32(make([]float32, cols)), cpu.WrapI32([]int32{6, 7})); !errors.Is(err, ErrInput) {
		t.Fatalf("short destination: %v", err)
	}
	src.fail = errors.New("machine 1 gone")
	if err := s.Gather(cpu.WrapF32(make([]float32, cols)), cpu.WrapI32([]int32{1})); !errors.Is(err, src.fail) {
		t.Fatalf("source failure: %v", err)
	}
	for _, c := range [][4]int{{rows, cols, 8, 5}, {rows, cols, 0, rows + 1}, {rows, 0, 0, 1}} {
		if _, err := NewShardStore(b, m, src, c[0], c[1], c[2], c[3]); !errors.Is(err, ErrInput) {
			t.Fatalf("shard %v: %v", c, err)
		}
	}
	if _, err := NewHostShard(b, x[:3], lo, hi, cols, nil); !errors.Is(err, ErrInput) {
		t.Fatalf("short shard: %v", err)
	}
	// A staged position out of range is refused by the machine.
	pos, _, err := m.Stage(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	pos[0] = 0
	if err := m.GatherStaged(cpu.WrapF32(make([]float32, cols)), cpu.WrapI32([]int32{1}), 1, 0, 0, 0); !errors.Is(err, ErrInput) {
		t.Fatalf("staged position past the staged rows: %v", err)
	}
}

// TestShardStoreGatherDropout: the dropout gather of a shard store leaves,
// bit for bit, what Gather followed by backend.Dropout leaves, for local
// and staged rows alike; p == 0 is Gather, and a bad p is refused.
func TestShardStoreGatherDropout(t *testing.T) {
	const rows, cols, lo, hi = 40, 3, 10, 25
	x := shardTable(rows, cols)
	x[lo*cols+1] = float32(math.Inf(-1)) // a local row's value
	x[3*cols+2] = float32(math.Copysign(0, -1))
	b, s, _ := hostShardStore(t, x, rows, cols, lo, hi, 4)
	ids := []int32{10, 3, 24, 39, 3, 25, 9, 12, 39, 0, 10}
	nodes := cpu.WrapI32(ids)
	for _, p := range []float32{0, 0.25, 0.5, 0.9} {
		const seed = 77
		want := make([]float32, len(ids)*cols)
		if err := s.Gather(cpu.WrapF32(want), nodes); err != nil {
			t.Fatal(err)
		}
		if p > 0 {
			mask := make([]float32, len(want))
			if err := b.Dropout(cpu.WrapF32(want), cpu.WrapF32(mask), cpu.WrapF32(want), p, seed); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]float32, len(want))
		if err := s.GatherDropout(cpu.WrapF32(got), nodes, p, seed); err != nil {
			t.Fatal(err)
		}
		dropped := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("p %v value %d: %v, want %v (Gather then Dropout)", p, i, got[i], want[i])
			}
			if got[i] == 0 && x[int(ids[i/cols])*cols+i%cols] != 0 {
				dropped++
			}
		}
		if (p == 0) != (dropped == 0) {
			t.Fatalf("p %v: %d of %d values dropped", p, dropped, len(want))
		}
	}
	for _, p := range []float32{-0.1, 1, float32(math.NaN())} {
		if err := s.GatherDropout(cpu.WrapF32(make([]float32, cols)), cpu.WrapI32([]int32{1}), p, 1); !errors.Is(err, ErrInput) {
			t.Fatalf("p %v: %v", p, err)
		}
	}
}

// prefetchSource is a tableSource that also prefetches: it records the
// lists it was told of.
type prefetchSource struct {
	tableSource
	ahead [][]int32
}

func (p *prefetchSource) Prefetch(ids []int32) { p.ahead = append(p.ahead, slices.Clone(ids)) }

// TestShardStorePrefetchAsksWhatGatherWill: Prefetch tells the source
// the very list the batch's gather then asks for (remote rows once each,
// first-seen order, out-of-range IDs left out); a source that does not
// prefetch is left alone.
func TestShardStorePrefetchAsksWhatGatherWill(t *testing.T) {
	const rows, cols, lo, hi = 40, 3, 10, 25
	x := shardTable(rows, cols)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &prefetchSource{tableSource: tableSource{x: x, cols: cols}}
	s, err := NewShardStore(b, m, src, rows, cols, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{10, 3, 24, 39, 3, 25, 9, 12, 39, 0, 10}
	s.Prefetch(append(slices.Clone(ids), -1, 40))
	s.Prefetch([]int32{10, 11, 24}) // nothing remote: nothing told
	if err := s.Gather(cpu.WrapF32(make([]float32, len(ids)*cols)), cpu.WrapI32(ids)); err != nil {
		t.Fatal(err)
	}
	if want := [][]int32{{3, 39, 25, 9, 0}}; fmt.Sprint(src.ahead) != fmt.Sprint(want) || fmt.Sprint(src.asked) != fmt.Sprint(want) {
		t.Fatalf("prefetched %v, asked %v; want both %v", src.ahead, src.asked, want)
	}
	_, plain, tsrc := hostShardStore(t, x, rows, cols, lo, hi, 0)
	plain.Prefetch(ids)
	if len(tsrc.asked) != 0 {
		t.Fatalf("a source without Prefetch was asked %v", tsrc.asked)
	}
}

// hotSource is a tableSource that, as dsp/machines' Service, serves the
// machine's hot rows of other machines from its own copy and counts
// them (Service.HotHits): what a device does not hold is staged.
type hotSource struct {
	tableSource
	hot  map[int32]bool
	hits int
}

func (h *hotSource) Gather(ids []int32, out []float32) error {
	for _, v := range ids {
		if h.hot[v] {
			h.hits++
		}
	}
	return h.tableSource.Gather(ids, out)
}

// TestNewShardCacheChoosesHottestLocal: a device keeps the plan's rows
// the machine holds (its own and its hot rows of other machines) in the
// plan's order, then the other hot rows hottest first, up to its
// capacity; rows of other machines that are not hot are never kept.
func TestNewShardCacheChoosesHottestLocal(t *testing.T) {
	const rows, cols, lo, hi = 40, 3, 10, 25
	x := shardTable(rows, cols)
	hotIDs := []int32{39, 3, 0, 27}
	hotX := rowsOf(x, hotIDs, cols)
	plan := []graph.NodeID{39, 12, 3, 30, 11}
	for _, c := range []struct {
		capacity   int
		own, held  string
		at         string
		heldValues bool
	}{
		{3, "[12]", "[39 3]", "[0 1]", true},
		{4, "[12 11]", "[39 3]", "[0 1]", true},
		{6, "[12 11]", "[39 3 0 27]", "[0 1 2 3]", true},
		{-1, "[12 11]", "[39 3 0 27]", "[0 1 2 3]", true},
		{0, "[]", "[]", "[]", false},
	} {
		sc, err := NewShardCache(plan, hotIDs, hotX, rows, cols, lo, hi, c.capacity)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(sc.Own) != c.own || fmt.Sprint(sc.Held) != c.held || fmt.Sprint(sc.HeldAt) != c.at {
			t.Fatalf("capacity %d: own %v held %v at %v, want %s %s %s", c.capacity, sc.Own, sc.Held, sc.HeldAt, c.own, c.held, c.at)
		}
		for j, v := range sc.Held {
			if got, want := fmt.Sprint(sc.heldRow(j, cols)), fmt.Sprint(x[int(v)*cols:(int(v)+1)*cols]); got != want {
				t.Fatalf("held row %d (node %d): %s, want %s", j, v, got, want)
			}
		}
	}
	for _, bad := range []struct {
		plan []graph.NodeID
		ids  []int32
		x    []float32
	}{
		{plan, []int32{39, 12}, rowsOf(x, []int32{39, 12}, cols)}, // a shard row listed as another machine's
		{plan, []int32{39, 39}, rowsOf(x, []int32{39, 39}, cols)}, // twice
		{plan, []int32{40}, make([]float32, cols)},                // out of range
		{plan, hotIDs, hotX[:cols]},                               // values short
		{[]graph.NodeID{12, 40}, hotIDs, hotX},                    // a plan row out of range
	} {
		if _, err := NewShardCache(bad.plan, bad.ids, bad.x, rows, cols, lo, hi, -1); !errors.Is(err, ErrInput) {
			t.Fatalf("plan %v hot %v (%d values): %v", bad.plan, bad.ids, len(bad.x), err)
		}
	}
}

// rowsOf is the rows ids of the table x, cols wide.
func rowsOf(x []float32, ids []int32, cols int) []float32 {
	var out []float32
	for _, v := range ids {
		out = append(out, x[int(v)*cols:(int(v)+1)*cols]...)
	}
	return out
}

// TestShardStoreServesHeldRows: hot rows of other machines that the
// device's budget holds are read from its held rows: never asked of the
// source (no staging, no prefetch), counted as held; with a budget that
// does not hold them they are staged through the source (which reads its
// hot copy: its hot hits). The rows are the table's either way, with and
// without input dropout.
func TestShardStoreServesHeldRows(t *testing.T) {
	const rows, cols, lo, hi = 40, 3, 10, 25
	x := shardTable(rows, cols)
	hotIDs := []int32{39, 3, 0, 27}
	hotX := rowsOf(x, hotIDs, cols)
	var plan []graph.NodeID
	for v := lo; v < hi; v++ {
		plan = append(plan, graph.NodeID(v))
	}
	ids := []int32{10, 3, 24, 39, 3, 25, 9, 12, 39, 0, 10, 27}
	for _, c := range []struct {
		capacity          int
		held, staged      int64
		asked             string
		hostHits, devHeld int
	}{
		{-1, 6, 2, "[[25 9]]", 0, 4},                // the budget holds the shard and every hot row
		{16, 2, 5, "[[3 25 9 0 27]]", 3, 1},         // room for one hot row (the hottest, 39)
		{hi - lo, 0, 6, "[[3 39 25 9 0 27]]", 4, 0}, // the shard fills the budget
	} {
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := NewShardCache(plan, hotIDs, hotX, rows, cols, lo, hi, c.capacity)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, sc)
		if err != nil {
			t.Fatal(err)
		}
		src := &hotSource{tableSource: tableSource{x: x, cols: cols}, hot: map[int32]bool{39: true, 3: true, 0: true, 27: true}}
		pf := &prefetchSource{}
		s, err := NewShardStore(b, m, src, rows, cols, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Held()) != c.devHeld || s.HotRows() != hi-lo+c.devHeld {
			t.Fatalf("capacity %d: %d held rows, %d cached, want %d and %d", c.capacity, len(m.Held()), s.HotRows(), c.devHeld, hi-lo+c.devHeld)
		}
		// The prefetch tells a source the list the gather asks.
		sp, err := NewShardStore(b, m, pf, rows, cols, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		sp.Prefetch(ids)
		got := make([]float32, len(ids)*cols)
		if err := s.Gather(cpu.WrapF32(got), cpu.WrapI32(ids)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, rowsOf(x, ids, cols)) {
			t.Fatalf("capacity %d: rows %v, want the table's %v", c.capacity, got, rowsOf(x, ids, cols))
		}
		held, staged := s.Served()
		if held != c.held || staged != c.staged || fmt.Sprint(src.asked) != c.asked || src.hits != c.hostHits {
			t.Fatalf("capacity %d: %d held, %d staged, asked %v (%d hot on the host); want %d, %d, %s (%d)",
				c.capacity, held, staged, src.asked, src.hits, c.held, c.staged, c.asked, c.hostHits)
		}
		if fmt.Sprint(pf.ahead) != c.asked {
			t.Fatalf("capacity %d: prefetched %v, the gather asked %v", c.capacity, pf.ahead, c.asked)
		}
		// Dropout: the same bits as Gather then Dropout, held rows too.
		const p, seed = 0.5, 9
		want := slices.Clone(got)
		mask := make([]float32, len(want))
		if err := b.Dropout(cpu.WrapF32(want), cpu.WrapF32(mask), cpu.WrapF32(want), p, seed); err != nil {
			t.Fatal(err)
		}
		if err := s.GatherDropout(cpu.WrapF32(got), cpu.WrapI32(ids), p, seed); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("capacity %d value %d: %v, want %v", c.capacity, i, got[i], want[i])
			}
		}
	}
}

// TestShardStoreHeldRefusals: a machine holding a row of its own shard
// as another machine's, or twice, is refused; a held position past the
// held rows is refused by the machine.
func TestShardStoreHeldRefusals(t *testing.T) {
	const rows, cols, lo, hi = 20, 2, 5, 10
	x := shardTable(rows, cols)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := &tableSource{x: x, cols: cols}
	for _, held := range [][]int32{{6}, {1, 1}, {20}} {
		c := &ShardCache{Held: held, HeldAt: make([]int32, len(held)), HeldX: make([]float32, cols)}
		m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewShardStore(b, m, src, rows, cols, lo, hi); !errors.Is(err, ErrInput) {
			t.Fatalf("held %v: %v", held, err)
		}
	}
	for _, c := range []*ShardCache{
		{Held: []int32{1}, HeldAt: []int32{1}, HeldX: make([]float32, cols)}, // past HeldX
		{Held: []int32{1}, HeldX: make([]float32, cols)},                     // no place
		{Own: []graph.NodeID{3}},                                             // not the shard's
	} {
		if _, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, c); !errors.Is(err, ErrInput) {
			t.Fatalf("cache %+v: %v", c, err)
		}
	}
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, &ShardCache{Held: []int32{1}, HeldAt: []int32{0}, HeldX: x[cols : 2*cols]})
	if err != nil {
		t.Fatal(err)
	}
	pos, _, err := m.Stage(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	pos[0] = HeldPos(1)
	if err := m.GatherStaged(cpu.WrapF32(make([]float32, cols)), cpu.WrapI32([]int32{1}), 1, 0, 0, 0); !errors.Is(err, ErrInput) {
		t.Fatalf("held position past the held rows: %v", err)
	}
}
