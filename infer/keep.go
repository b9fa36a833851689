package infer

import (
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Keep holds what a Run uploaded to its devices for the next Run of the
// same work: training's evaluation runs the same request over the same
// graph and features every epoch, and only the model's parameters
// change. Kept per device, within its budget: the chunks' blocks (the
// in-edges of a chunk's nodes, CSR slices of the graph) with their
// source lists and, when the features are read on the device, the
// feature matrix. The first Run chooses the chunk budgets and later Runs
// reuse them, so the chunks, and what was kept of them, are the same.
//
// A Run whose graph, features, request or devices differ (compared as
// the same slices and back ends) drops what was kept first. Free
// releases everything; a Keep is used by one Run at a time.
type Keep struct {
	// Budget is the bytes a device may keep (device buffers and the
	// host lists they go with); 0 picks one at the first Run: a quarter
	// of the device's free memory on back ends that report it
	// (backend.Memory), DefaultBudget on others.
	Budget int64

	mu      sync.Mutex
	sig     keepSig
	budgets []int64 // the chunk budgets of the first Run
	limit   []int64 // per device: what it may keep
	used    []int64
	feats   []backend.Buffer // per device: layer 1's input; shared by virtual devices
	chunks  []map[[2]int]*keptChunk
	bs      []backend.Backend
	need    [][]int32 // the first Run's plan
	gcnDeg  []int64
	exch    []comm.Comm // the resident layers' exchange, opened by a Run
}

// keptChunk is a chunk of layer l on a device, ready to run again.
type keptChunk struct {
	b   backend.Backend
	blk *nn.Block
	idx backend.Buffer // the sources' IDs on the device (nil: gathered on the host)
	src []int32
}

func (kc *keptChunk) free() {
	kc.blk.Free()
	if kc.idx != nil {
		kc.b.Free(kc.idx)
	}
}

// keepSig identifies the work a Keep holds.
type keepSig struct {
	in                      *graph.CSR
	dense                   *float32
	sparse                  unsafe.Pointer
	nodes                   *int32
	nodeCount, last, layers int
}

func signature(r *run) keepSig {
	s := keepSig{in: r.in, dense: unsafe.SliceData(r.x.Dense), sparse: unsafe.Pointer(r.x.Sparse),
		nodes: unsafe.SliceData(r.req.Nodes), nodeCount: len(r.req.Nodes), last: r.last, layers: r.cfg.Layers}
	return s
}

// attach makes k serve r: what k holds is dropped unless it was kept
// for the same work on the same devices. It reports whether r reuses
// k's plan (the nodes of every layer, GCN's degrees, the chunk
// budgets); otherwise r plans and k records it (record).
func (k *Keep) attach(r *run) (reused bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	sig := signature(r)
	p := len(r.opts.Backends)
	if k.sig == sig && k.budgets != nil && sameBackends(k.bs, r.opts.Backends) {
		r.need, r.gcnDeg, r.budgets = k.need, k.gcnDeg, k.budgets
		return true, nil
	}
	k.freeLocked()
	k.sig = sig
	k.bs = append([]backend.Backend(nil), r.opts.Backends...)
	k.chunks = make([]map[[2]int]*keptChunk, p)
	for d := range k.chunks {
		k.chunks[d] = map[[2]int]*keptChunk{}
	}
	k.feats = make([]backend.Buffer, p)
	k.used = make([]int64, p)
	k.limit = make([]int64, p)
	for d, b := range r.opts.Backends {
		k.limit[d] = k.Budget
		if k.limit[d] == 0 {
			k.limit[d] = DefaultBudget
			if m, ok := b.(backend.Memory); ok {
				free, _, err := m.MemInfo()
				if err != nil {
					k.sig = keepSig{}
					return false, &Error{Op: "memory of " + b.Name(), Err: err}
				}
				k.limit[d] = int64(free / 4)
			}
		}
	}
	return false, nil
}

// record keeps r's plan for the next Run (after attach said none was
// reused).
func (k *Keep) record(r *run) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.need, k.gcnDeg, k.budgets = r.need, r.gcnDeg, r.budgets
}

// chunk returns device d's kept chunk c of layer l, or nil.
func (k *Keep) chunk(d, l, c int) *keptChunk {
	if k == nil {
		return nil
	}
	return k.chunks[d][[2]int{l, c}] // each device's map is its worker's alone
}

// offer keeps chunk c of layer l on device d if it fits d's budget; it
// reports whether k took it (then k frees it).
func (k *Keep) offer(d, l, c int, kc *keptChunk) bool {
	if k == nil {
		return false
	}
	bytes := 2*(8*int64(kc.blk.NumDst+1)+4*int64(kc.blk.NNZ())) + 4*int64(len(kc.src))
	if kc.idx != nil {
		bytes += 4 * int64(len(kc.src))
	}
	if k.used[d]+bytes > k.limit[d] {
		return false
	}
	k.used[d] += bytes
	k.chunks[d][[2]int{l, c}] = kc
	return true
}

// features returns device d's kept feature matrix (nil if none), or keeps
// buf (of bytes) when it fits; it reports whether buf is k's now.
func (k *Keep) features(d int, buf backend.Buffer, bytes int64) (backend.Buffer, bool) {
	if k == nil {
		return nil, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if buf == nil {
		return k.feats[d], false
	}
	if k.used[d]+bytes > k.limit[d] {
		return nil, false
	}
	k.used[d] += bytes
	k.feats[d] = buf
	return buf, true
}

// exchange returns the kept communicators of the resident layers, or nil.
func (k *Keep) exchange() []comm.Comm {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.exch
}

// keepExchange keeps cs (opened by a Run for k's devices) for the next
// Runs; it reports whether k took them (then k closes them).
func (k *Keep) keepExchange(cs []comm.Comm) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.exch != nil || k.bs == nil {
		return false
	}
	k.exch = cs
	return true
}

// dropExchange forgets the kept communicators without closing them (a
// failed Run closes them: a communicator is broken after a failure).
func (k *Keep) dropExchange() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.exch = nil
}

// Free releases everything k holds.
func (k *Keep) Free() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.freeLocked()
}

func (k *Keep) freeLocked() {
	for d, m := range k.chunks {
		for _, kc := range m {
			kc.free()
		}
		k.chunks[d] = nil
	}
	for d, f := range k.feats {
		if f != nil && sameBackend(k.bs[:d], k.bs[d]) < 0 { // shared by virtual devices: freed once
			k.bs[d].Free(f)
		}
	}
	for _, c := range k.exch {
		c.Close()
	}
	k.exch = nil
	k.chunks, k.feats, k.used, k.limit, k.budgets, k.bs, k.need, k.gcnDeg, k.sig = nil, nil, nil, nil, nil, nil, nil, nil, keepSig{}
}

// sameBackends reports whether a and b are the same back ends in order.
func sameBackends(a, b []backend.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
