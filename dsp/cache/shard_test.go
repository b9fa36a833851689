package cache

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

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
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, hot)
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
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, 0)
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
	if _, err := NewHostShard(b, x[:3], lo, hi, cols, 0); !errors.Is(err, ErrInput) {
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
	m, err := NewHostShard(b, x[lo*cols:hi*cols], lo, hi, cols, 0)
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
