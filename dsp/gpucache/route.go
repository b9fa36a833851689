package gpucache

import (
	"fmt"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/graph"
)

// Route says where each row of one batch comes from on device Rank.
//
// The loader assembles the rows in a staging buffer: first the rows it
// gathers itself (Local: rows it caches and cold rows read from host
// memory), then the rows each peer sends, peer 0 first. Perm[i] is the
// staging row of nodes[i], so the batch's feature matrix is one row
// gather of the staging buffer by Perm.
type Route struct {
	Local      []int32 // node ids this device gathers, staging rows 0..len-1
	Send       []int32 // node ids asked of peers, grouped by peer in rank order
	SendCounts []int   // per peer: how many of Send it serves (0 for Rank)
	Perm       []int32 // per input position: its staging row
	Hits       int     // rows of Local this device caches
	Cold       int     // rows of Local read from host memory
}

// Peer is the number of rows asked of peers.
func (r *Route) Peer() int { return len(r.Send) }

// Router routes batches for one device under a cache plan. It keeps
// scratch space between calls and is not safe for concurrent use.
type Router struct {
	plan *cache.Plan
	rank int
	rows int
	dev  []int32 // scratch: holder per input position
}

// NewRouter returns the router of device rank for a plan over rows nodes.
func NewRouter(plan *cache.Plan, rank, rows int) (*Router, error) {
	if plan == nil {
		return nil, fmt.Errorf("%w: nil plan", ErrInput)
	}
	if rank < 0 || rank >= plan.Devices() || rows < 0 {
		return nil, fmt.Errorf("%w: rank %d of %d devices, %d rows", ErrInput, rank, plan.Devices(), rows)
	}
	return &Router{plan: plan, rank: rank, rows: rows}, nil
}

// Route routes the batch's input nodes (each in [0, rows); repeats are
// served once per position).
func (r *Router) Route(nodes []graph.NodeID) (*Route, error) {
	k := r.plan.Devices()
	if cap(r.dev) < len(nodes) {
		r.dev = make([]int32, len(nodes))
	}
	dev := r.dev[:len(nodes)]
	rt := &Route{SendCounts: make([]int, k), Perm: make([]int32, len(nodes))}
	nLocal := 0
	for i, v := range nodes {
		if v < 0 || int(v) >= r.rows {
			return nil, fmt.Errorf("%w: input node %d (position %d) not in [0, %d)", ErrInput, v, i, r.rows)
		}
		h, _ := r.plan.Holder(r.rank, v)
		switch {
		case h < 0:
			rt.Cold++
			nLocal++
			h = r.rank
		case h == r.rank:
			rt.Hits++
			nLocal++
		default:
			rt.SendCounts[h]++
		}
		dev[i] = int32(h)
	}
	// Staging rows: Local first, then each peer's block in rank order.
	next := make([]int, k)
	at := nLocal
	for p := range k {
		if p != r.rank {
			next[p] = at
			at += rt.SendCounts[p]
		}
	}
	rt.Local = make([]int32, 0, nLocal)
	rt.Send = make([]int32, at-nLocal)
	for i, v := range nodes {
		h := int(dev[i])
		if h == r.rank {
			rt.Perm[i] = int32(len(rt.Local))
			rt.Local = append(rt.Local, v)
			continue
		}
		rt.Perm[i] = int32(next[h])
		rt.Send[next[h]-nLocal] = v
		next[h]++
	}
	return rt, nil
}
