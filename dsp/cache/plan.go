package cache

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

// Policy says how devices share the cache.
type Policy string

const (
	// Partition: each device caches the hottest nodes of its own patch.
	Partition Policy = "partition"
	// Replicate: each group of GroupSize devices holds the global hottest
	// nodes, split among its members.
	Replicate Policy = "replicate"
	// Auto replicates over the smallest group of devices whose budgets
	// together hold every hot row, and partitions when only all devices
	// together can: the same rows cached, with the fewest fetched from
	// peers. (With every row cached on each device, no feature crosses a
	// link.)
	Auto Policy = "auto"
)

// ParsePolicy checks a policy name ("" is Partition).
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Partition, Replicate, Auto:
		return p, nil
	case "":
		return Partition, nil
	}
	return "", inputErr("unknown cache policy %q (want partition, replicate or auto)", s)
}

// autoGroup is Auto's group size for k devices caching up to capacity
// rows each out of hot candidates: the smallest divisor g of k with
// g*capacity >= hot, else k.
func autoGroup(k int, capacity, hot int64) int {
	for g := 1; g < k; g++ {
		if k%g == 0 && int64(g)*capacity >= hot {
			return g
		}
	}
	return k
}

// PlanConfig configures a Plan.
type PlanConfig struct {
	// BudgetBytes is the device memory each device gives to cached rows
	// (rows of cols float32). 0 caches nothing.
	BudgetBytes int64
	Policy      Policy
	// GroupSize is the number of devices sharing one copy under
	// Replicate; it must divide the number of devices. 0 means 1.
	GroupSize int
	// ValueBytes is the size of a cached value: 4 (float32, the
	// default for 0) or 2 (bfloat16 stores, ValueBytes(BF16)).
	ValueBytes int64
}

// Plan says which device caches which rows. Every device builds the same
// plan from the same inputs, so no device needs to ask where a row is.
// It is immutable and safe for concurrent use.
type Plan struct {
	k, group int
	cols     int
	vbytes   int64
	member   []int32 // per node: member of the requester's group caching it, -1 = cold
	slot     []int32 // per node: row in that member's cache
	rows     [][]graph.NodeID
	policy   Policy
}

// NewPlan builds the plan for the devices of book b, features of cols
// columns, and the hotness order (hottest first; nodes not listed are
// never cached; repeats are an error).
func NewPlan(b *book.Book, hot []graph.NodeID, cols int, cfg PlanConfig) (*Plan, error) {
	if b == nil {
		return nil, inputErr("nil book")
	}
	if cols <= 0 {
		return nil, inputErr("%d feature columns", cols)
	}
	if cfg.BudgetBytes < 0 {
		return nil, inputErr("negative budget %d", cfg.BudgetBytes)
	}
	vb := cfg.ValueBytes
	switch vb {
	case 0:
		vb = 4
	case 2, 4:
	default:
		return nil, inputErr("%d bytes a value (want 2 or 4)", vb)
	}
	pol := cfg.Policy
	if pol == "" {
		pol = Partition
	}
	k, n := b.K(), b.NumNodes()
	capacity := cfg.BudgetBytes / (vb * int64(cols))
	capacity = min(capacity, math.MaxInt32)
	if pol == Auto {
		if cfg.GroupSize != 0 {
			return nil, inputErr("group size %d: the auto policy chooses the group", cfg.GroupSize)
		}
		pol, cfg.GroupSize = Partition, 0
		if g := autoGroup(k, capacity, int64(len(hot))); g < k && capacity > 0 {
			pol, cfg.GroupSize = Replicate, g
		}
	}
	g := k
	switch pol {
	case Partition:
		if cfg.GroupSize != 0 && cfg.GroupSize != k {
			return nil, inputErr("group size %d: the partition policy spans all %d devices", cfg.GroupSize, k)
		}
	case Replicate:
		g = max(cfg.GroupSize, 1)
		if g > k || k%g != 0 {
			return nil, inputErr("group size %d does not divide %d devices", g, k)
		}
	default:
		return nil, inputErr("unknown policy %q", pol)
	}
	p := &Plan{k: k, group: g, cols: cols, vbytes: vb, member: make([]int32, n), slot: make([]int32, n), rows: make([][]graph.NodeID, g), policy: pol}
	parallelRows(int(n), func(lo, hi int) {
		for v := lo; v < hi; v++ {
			p.member[v] = -1
		}
	})
	if err := checkHot(hot, n); err != nil {
		return nil, err
	}
	if capacity == 0 {
		return p, nil
	}
	if pol == Partition {
		p.assignOwners(b, hot, capacity)
		return p, nil
	}
	p.assignMembers(hot[:min(int64(len(hot)), capacity*int64(g))])
	return p, nil
}

// planChunks splits [0, n) into the chunks NewPlan's passes share: one
// per CPU, at least 1<<16 items each.
func planChunks(n int) []int {
	parts := max(min(runtime.GOMAXPROCS(0), n>>16), 1)
	b := make([]int, parts+1)
	for i := range b {
		b[i] = n * i / parts
	}
	return b
}

// forChunks runs fn on every chunk of bounds at once and waits.
func forChunks(bounds []int, fn func(c, lo, hi int)) {
	var wg sync.WaitGroup
	for c := range len(bounds) - 1 {
		wg.Go(func() { fn(c, bounds[c], bounds[c+1]) })
	}
	wg.Wait()
}

// checkHot checks that every node of hot is in [0, n) and listed once:
// in parallel chunks marking a bit per node, then, only when something
// is wrong, again in order to name the first bad entry as a serial check
// would.
func checkHot(hot []graph.NodeID, n int64) error {
	seen := make([]uint64, (n+63)/64)
	var bad atomic.Bool
	forChunks(planChunks(len(hot)), func(_, lo, hi int) {
		for _, v := range hot[lo:hi] {
			if v < 0 || int64(v) >= n || atomic.OrUint64(&seen[v>>6], 1<<(v&63))&(1<<(v&63)) != 0 {
				bad.Store(true)
				return
			}
		}
	})
	if !bad.Load() {
		return nil
	}
	clear(seen)
	for i, v := range hot {
		if v < 0 || int64(v) >= n {
			return inputErr("hot[%d] = %d not in [0, %d)", i, v, n)
		}
		if seen[v>>6]&(1<<(v&63)) != 0 {
			return inputErr("hot[%d] = %d repeats an earlier node", i, v)
		}
		seen[v>>6] |= 1 << (v & 63)
	}
	return nil
}

// assignOwners is the Partition policy: every device caches the hottest
// capacity nodes it owns, in hot order. Chunks of hot count their nodes
// per owner, then place them from their owners' running counts, so the
// result is that of one pass in order.
func (p *Plan) assignOwners(b *book.Book, hot []graph.NodeID, capacity int64) {
	bounds := planChunks(len(hot))
	counts := make([][]int64, len(bounds)-1)
	forChunks(bounds, func(c, lo, hi int) {
		cnt := make([]int64, p.k)
		for _, v := range hot[lo:hi] {
			cnt[b.Owner(int64(v))]++
		}
		counts[c] = cnt
	})
	// counts[c][o] becomes the rank, among owner o's nodes, of chunk
	// c's first one.
	for o := range p.k {
		var at int64
		for _, cnt := range counts {
			at, cnt[o] = at+cnt[o], at
		}
		p.rows[o] = make([]graph.NodeID, min(at, capacity))
	}
	forChunks(bounds, func(c, lo, hi int) {
		next := counts[c]
		for _, v := range hot[lo:hi] {
			o := b.Owner(int64(v))
			if r := next[o]; r < capacity {
				p.member[v], p.slot[v] = int32(o), int32(r)
				p.rows[o][r] = v
			}
			next[o]++
		}
	})
}

// assignMembers is the Replicate policy: node j of top (the hottest
// nodes a group holds) goes to member j%g's cache, at row j/g.
func (p *Plan) assignMembers(top []graph.NodeID) {
	g := p.group
	for m := range g {
		p.rows[m] = make([]graph.NodeID, (len(top)-m+g-1)/g)
	}
	forChunks(planChunks(len(top)), func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			v, m, r := top[j], j%g, j/g
			p.member[v], p.slot[v] = int32(m), int32(r)
			p.rows[m][r] = v
		}
	})
}

// Devices is the number of devices.
func (p *Plan) Devices() int { return p.k }

// GroupSize is the number of devices sharing one copy of the cache.
func (p *Plan) GroupSize() int { return p.group }

// Policy is the plan's policy (Partition or Replicate: Auto is resolved).
func (p *Plan) Policy() Policy { return p.policy }

// Cols is the feature width.
func (p *Plan) Cols() int { return p.cols }

// Holder returns the device that serves node v to device rank (a member of
// rank's group), and the row of v in that device's cache; -1 when v is cold.
func (p *Plan) Holder(rank int, v graph.NodeID) (dev int, slot int32) {
	m := p.member[v]
	if m < 0 {
		return -1, -1
	}
	return (rank/p.group)*p.group + int(m), p.slot[v]
}

// Rows returns the nodes device rank caches, in slot order.
func (p *Plan) Rows(rank int) []graph.NodeID { return p.rows[rank%p.group] }

// CachedNodes is the number of distinct nodes cached by one group.
func (p *Plan) CachedNodes() int {
	t := 0
	for _, r := range p.rows {
		t += len(r)
	}
	return t
}

// ValueBytes is the size of a cached value (PlanConfig.ValueBytes).
func (p *Plan) ValueBytes() int64 { return p.vbytes }

// TableBytes is the location table every device holds (8 bytes a node).
func (p *Plan) TableBytes() int64 { return 8 * int64(len(p.member)) }
