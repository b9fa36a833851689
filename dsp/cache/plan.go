package cache

import (
	"math"

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
	for v := range p.member {
		p.member[v] = -1
	}
	seen := make([]bool, n)
	for i, v := range hot {
		if v < 0 || int64(v) >= n {
			return nil, inputErr("hot[%d] = %d not in [0, %d)", i, v, n)
		}
		if seen[v] {
			return nil, inputErr("hot[%d] = %d repeats an earlier node", i, v)
		}
		seen[v] = true
	}
	if capacity == 0 {
		return p, nil
	}
	if pol == Partition {
		for _, v := range hot {
			o := b.Owner(int64(v))
			if int64(len(p.rows[o])) < capacity {
				p.member[v], p.slot[v] = int32(o), int32(len(p.rows[o]))
				p.rows[o] = append(p.rows[o], v)
			}
		}
		return p, nil
	}
	top := min(int64(len(hot)), capacity*int64(g))
	for j, v := range hot[:top] {
		m := j % g
		p.member[v], p.slot[v] = int32(m), int32(len(p.rows[m]))
		p.rows[m] = append(p.rows[m], v)
	}
	return p, nil
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
