package gpucache

import (
	"fmt"
	"runtime"
	"sync"

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
	plan   *cache.Plan
	rank   int
	rows   int
	holder []int8 // per node: the device serving it to rank (itself for cold rows)
	dev    []int8 // scratch: holder per input position
}

// maxRouteDevices bounds the devices a Router handles (holders are int8).
const maxRouteDevices = 127

// NewRouter returns the router of device rank for a plan over rows nodes.
func NewRouter(plan *cache.Plan, rank, rows int) (*Router, error) {
	if plan == nil {
		return nil, fmt.Errorf("%w: nil plan", ErrInput)
	}
	if rank < 0 || rank >= plan.Devices() || rows < 0 {
		return nil, fmt.Errorf("%w: rank %d of %d devices, %d rows", ErrInput, rank, plan.Devices(), rows)
	}
	if int64(rows) != plan.TableBytes()/8 {
		return nil, fmt.Errorf("%w: %d rows for a plan over %d nodes", ErrInput, rows, plan.TableBytes()/8)
	}
	if plan.Devices() > maxRouteDevices {
		return nil, fmt.Errorf("%w: %d devices, at most %d", ErrInput, plan.Devices(), maxRouteDevices)
	}
	// A byte per node keeps the lookups of a batch's random IDs in cache.
	h := make([]int8, rows)
	for v := range h {
		d, _ := plan.Holder(rank, graph.NodeID(v))
		if d < 0 {
			d = -1
		}
		h[v] = int8(d)
	}
	return &Router{plan: plan, rank: rank, rows: rows, holder: h}, nil
}

// Count returns how many of ids this device caches (hits) and how many
// are cold (neither it nor a peer caches them).
func (r *Router) Count(ids []graph.NodeID) (hits, cold int, err error) {
	for i, v := range ids {
		if v < 0 || int(v) >= r.rows {
			return 0, 0, fmt.Errorf("%w: input node %d (position %d) not in [0, %d)", ErrInput, v, i, r.rows)
		}
		switch int(r.holder[v]) {
		case -1:
			cold++
		case r.rank:
			hits++
		}
	}
	return hits, cold, nil
}

// routeChunk is the fewest positions a goroutine of Route handles.
const routeChunk = 1 << 16

// Route routes the batch's input nodes (each in [0, rows); repeats are
// served once per position). Large batches are routed by several
// goroutines over chunks of positions; the result is the same.
func (r *Router) Route(nodes []graph.NodeID) (*Route, error) {
	k, n := r.plan.Devices(), len(nodes)
	if cap(r.dev) < n {
		r.dev = make([]int8, n)
	}
	dev := r.dev[:n]
	chunks := max(1, min(n/routeChunk, runtime.GOMAXPROCS(0), 8))
	per := (n + chunks - 1) / max(chunks, 1)
	span := func(c int) (int, int) { return min(c*per, n), min((c+1)*per, n) }
	// Pass 1: holders and, per chunk, counts (slot k: rows gathered
	// here, slot k+1: cold rows among them).
	counts := make([][]int, chunks)
	errs := make([]error, chunks)
	parallel(chunks, func(c int) {
		lo, hi := span(c)
		cnt := make([]int, k+2)
		for i := lo; i < hi; i++ {
			v := nodes[i]
			if v < 0 || int(v) >= r.rows {
				errs[c] = fmt.Errorf("%w: input node %d (position %d) not in [0, %d)", ErrInput, v, i, r.rows)
				return
			}
			h := int(r.holder[v])
			if h < 0 {
				cnt[k+1]++
				h = r.rank
			}
			if h == r.rank {
				cnt[k]++
			} else {
				cnt[h]++
			}
			dev[i] = int8(h)
		}
		counts[c] = cnt
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	rt := &Route{SendCounts: make([]int, k), Perm: make([]int32, n)}
	nLocal := 0
	for _, cnt := range counts {
		nLocal += cnt[k]
		rt.Cold += cnt[k+1]
		for p := range k {
			rt.SendCounts[p] += cnt[p]
		}
	}
	rt.Hits = nLocal - rt.Cold
	// Staging rows: Local first, then each peer's block in rank order;
	// each chunk starts where the chunks before it end.
	base := make([]int, k)
	at := nLocal
	for p := range k {
		if p != r.rank {
			base[p] = at
			at += rt.SendCounts[p]
		}
	}
	starts := make([][]int, chunks) // per chunk: next staging row per holder (slot rank: local)
	local := 0
	for c, cnt := range counts {
		st := make([]int, k)
		for p := range k {
			if p == r.rank {
				st[p] = local
			} else {
				st[p] = base[p]
				base[p] += cnt[p]
			}
		}
		local += cnt[k]
		starts[c] = st
	}
	rt.Local = make([]int32, nLocal)
	rt.Send = make([]int32, at-nLocal)
	parallel(chunks, func(c int) {
		lo, hi := span(c)
		next := starts[c]
		for i := lo; i < hi; i++ {
			h, v := int(dev[i]), nodes[i]
			j := next[h]
			next[h]++
			rt.Perm[i] = int32(j)
			if h == r.rank {
				rt.Local[j] = v
			} else {
				rt.Send[j-nLocal] = v
			}
		}
	})
	return rt, nil
}

// parallel runs fn(0..n-1), on goroutines when n > 1.
func parallel(n int, fn func(int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() { fn(c) })
	}
	wg.Wait()
}
