package infer

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/tensor/backend"
)

// A layer input gathered on the host (too large for a device) is
// uploaded once per chunk that reads a row: at the papers shape the
// evaluation's layer 2 uploads about eight times the matrix. hotRows
// keeps on a device a copy of the rows read most (the nodes of highest
// in-degree, which the most destinations list), so that a chunk uploads
// only the rest: the same rows, copied exactly, so the output does not
// change.

// hotSet is the rows a layer keeps on the devices: slot[v] is node v's
// row in each device's copy, or -1.
type hotSet struct {
	slot  []int32
	nodes []int32 // by slot
	width int
}

// hotRows is one device's copy of a hotSet's rows.
type hotRows struct {
	set *hotSet
	buf backend.Buffer // len(set.nodes) x set.width
	// reads and hits count the chunks' source rows and those read from
	// buf (for the layer's log line).
	reads, hits atomic.Int64
}

// minHotBytes is the smallest copy worth its upload.
const minHotBytes = 64 << 20

// hotBytes returns what device d may give a layer's hot rows: the
// Options' HotBytes when set, else, on back ends that report their
// memory, what is free beside two chunk budgets (a chunk's sources are
// staged twice on the way) and 1 GiB; 0 for none (and with PlaceHost,
// unless HotBytes asks).
func (r *run) hotBytes(d int) int64 {
	switch hb := r.opts.HotBytes; {
	case hb < 0 || (hb == 0 && r.opts.Placement == PlaceHost):
		return 0
	case hb > 0:
		return hb
	}
	m, ok := r.opts.Backends[d].(backend.Memory)
	if !ok {
		return 0
	}
	free, _, err := m.MemInfo()
	if err != nil {
		return 0
	}
	left := int64(free) - 2*r.budgets[d] - 1<<30
	if left < minHotBytes {
		return 0
	}
	return left
}

// pickHot returns the hotSet of at most k rows among candidates (nil:
// every node): the highest in-degrees, ties by node ID; nil when k < 1.
// The choice depends only on the graph, so every run picks the same.
func (r *run) pickHot(candidates []int32, k, width int) *hotSet {
	n := r.n
	count := n
	if candidates != nil {
		count = len(candidates)
	}
	k = min(k, count)
	if k < 1 {
		return nil
	}
	node := func(i int) int32 {
		if candidates != nil {
			return candidates[i]
		}
		return int32(i)
	}
	deg := func(v int32) int64 { return r.in.Indptr[v+1] - r.in.Indptr[v] }
	// The threshold degree t: fewer than k rows above it, at least k at
	// or above it (degrees past maxBucket share a bucket).
	const maxBucket = 1 << 16
	hist := make([]int, maxBucket+1)
	for i := range count {
		hist[min(deg(node(i)), maxBucket)]++
	}
	t, above := maxBucket, 0
	for ; t > 0 && above+hist[t] < k; t-- {
		above += hist[t]
	}
	set := &hotSet{slot: make([]int32, n), nodes: make([]int32, 0, k), width: width}
	for i := range set.slot {
		set.slot[i] = -1
	}
	atT := k - above // rows of bucket t taken, in ID order
	for i := range count {
		v := node(i)
		b := min(deg(v), maxBucket)
		if b < int64(t) || (b == int64(t) && atT == 0) {
			continue
		}
		if b == int64(t) {
			atT--
		}
		set.slot[v] = int32(len(set.nodes))
		set.nodes = append(set.nodes, v)
	}
	return set
}

// placeHot gives the devices that gather layer l's input on the host
// (placed[d] nil) a copy of its most-read rows, as much as hotBytes
// allows (the smallest device's room: one set for all). Devices that
// share a back end share the copy. It returns nil when none is made.
func (r *run) placeHot(ctx context.Context, l int, placed []backend.Buffer) ([]*hotRows, error) {
	if l == 0 && r.x.Sparse != nil {
		return nil, nil
	}
	rows, width := r.hostInput(l)
	if width < 1 || len(rows) == 0 {
		return nil, nil
	}
	var devs []int
	k := -1
	for d, b := range r.opts.Backends {
		if placed[d] != nil || sameBackend(r.opts.Backends[:d], b) >= 0 {
			continue
		}
		kd := int(r.hotBytes(d) / int64(4*width))
		if kd < 1 {
			return nil, nil
		}
		if k < 0 || kd < k {
			k = kd
		}
		devs = append(devs, d)
	}
	var candidates []int32
	if l > 0 {
		candidates = r.need[l-1] // the rows the layer below computed
	}
	set := r.pickHot(candidates, k, width)
	if set == nil || len(devs) == 0 {
		return nil, nil
	}
	hot := make([]*hotRows, len(r.opts.Backends))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	workers := max(1, runtime.GOMAXPROCS(0)/len(devs))
	for i, d := range devs {
		wg.Go(func() {
			b := r.opts.Backends[d]
			buf, err := b.Alloc(backend.Float32, len(set.nodes)*width)
			if err == nil {
				err = fillRows(ctx, b, buf, rows, set.nodes, width, workers)
				if err != nil {
					b.Free(buf)
				}
			}
			if err != nil {
				errs[i] = &Error{Op: fmt.Sprintf("layer %d: %d most-read input rows on %s", l+1, len(set.nodes), b.Name()), Err: err}
				return
			}
			hot[d] = &hotRows{set: set, buf: buf}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			freeHot(r.opts.Backends, hot)
			return nil, err
		}
	}
	for d, b := range r.opts.Backends {
		if placed[d] == nil && hot[d] == nil {
			hot[d] = hot[sameBackend(r.opts.Backends[:d], b)]
		}
	}
	return hot, nil
}

// fillRows uploads rows[nodes[i]] into buf's row i, through a host buffer
// of at most fillPiece bytes.
func fillRows(ctx context.Context, b backend.Backend, buf backend.Buffer, rows []float32, nodes []int32, width, workers int) error {
	const fillPiece = 256 << 20
	per := max(1, fillPiece/(4*width))
	host := make([]float32, min(per, len(nodes))*width)
	for a := 0; a < len(nodes); a += per {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := min(a+per, len(nodes))
		h := host[:(e-a)*width]
		gatherRows(h, rows, nodes[a:e], width, workers)
		dst, err := backend.View(buf, a*width, len(h))
		if err == nil {
			err = b.Upload(dst, h)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// freeHot frees the devices' copies (a shared one once).
func freeHot(bs []backend.Backend, hot []*hotRows) {
	for d, h := range hot {
		if h != nil && h.buf != nil && slices.Index(hot, h) == d {
			bs[d].Free(h.buf)
		}
	}
}

// split sorts a chunk's sources (on workers goroutines: at the papers
// shape a chunk lists half a million, each a random read of slot): the
// slots of the hot ones, the cold ones' node IDs, both in source order,
// and perm, source i's row when the hot rows are staged first and the
// cold ones after them.
func (h *hotRows) split(src []int32, workers int) (slots, cold, perm []int32) {
	const minPart = 1 << 14
	parts := max(1, min(workers, len(src)/minPart))
	hits := make([]int, parts+1)
	forParts(len(src), parts, func(q, a, b int) {
		for _, v := range src[a:b] {
			if h.set.slot[v] >= 0 {
				hits[q+1]++
			}
		}
	})
	for q := range parts {
		hits[q+1] += hits[q]
	}
	hit := hits[parts]
	slots, cold, perm = make([]int32, hit), make([]int32, len(src)-hit), make([]int32, len(src))
	forParts(len(src), parts, func(q, a, b int) {
		i, j := hits[q], a-hits[q] // this part's first hot and cold positions
		for k, v := range src[a:b] {
			if s := h.set.slot[v]; s >= 0 {
				slots[i], perm[a+k] = s, int32(i)
				i++
			} else {
				cold[j], perm[a+k] = v, int32(hit+j)
				j++
			}
		}
	})
	return slots, cold, perm
}

// gatherHot returns a new device buffer holding rows[src[i]] in row i
// (len(src) x width): the rows w.hot holds copied on the device, the
// others gathered on the host and uploaded, then put in source order.
// ok is false when no source row is hot (the caller gathers them all on
// the host).
func (w *worker) gatherHot(src []int32, rows []float32, width int) (x backend.Buffer, ok bool, err error) {
	h, b := w.hot, w.b
	n := len(src)
	workers := w.r.gatherWorkers()
	slots, cold, perm := h.split(src, workers)
	hit := len(slots)
	h.reads.Add(int64(n))
	h.hits.Add(int64(hit))
	if hit == 0 {
		return nil, false, nil
	}
	var bufs []backend.Buffer
	defer func() {
		for _, x := range bufs {
			b.Free(x)
		}
	}()
	ints := func(v []int32) (backend.Buffer, error) {
		x, err := b.Alloc(backend.Int32, len(v))
		if err == nil {
			bufs = append(bufs, x)
			if len(v) > 0 {
				err = b.Upload(x, v)
			}
		}
		return x, err
	}
	if hit == n { // every row on the device: slots is in source order
		idx, err := ints(slots)
		if err != nil {
			return nil, false, err
		}
		if x, err = allocRaw(b, backend.Float32, n*width); err != nil {
			return nil, false, err
		}
		if err := b.GatherRows(x, h.buf, idx, len(h.set.nodes), width); err != nil {
			b.Free(x)
			return nil, false, err
		}
		return x, true, nil
	}
	stage, err := allocRaw(b, backend.Float32, n*width)
	if err != nil {
		return nil, false, err
	}
	bufs = append(bufs, stage)
	idx, err := ints(slots)
	if err != nil {
		return nil, false, err
	}
	hotPart, err := backend.View(stage, 0, hit*width)
	if err != nil {
		return nil, false, err
	}
	if err := b.GatherRows(hotPart, h.buf, idx, len(h.set.nodes), width); err != nil {
		return nil, false, err
	}
	host, err := w.staging(len(cold) * width)
	if err != nil {
		return nil, false, err
	}
	gatherRows(host, rows, cold, width, workers)
	coldPart, err := backend.View(stage, hit*width, len(host))
	if err != nil {
		return nil, false, err
	}
	if err := b.Upload(coldPart, host); err != nil {
		return nil, false, err
	}
	if err := w.staged(); err != nil {
		return nil, false, err
	}
	pidx, err := ints(perm)
	if err != nil {
		return nil, false, err
	}
	if x, err = allocRaw(b, backend.Float32, n*width); err != nil {
		return nil, false, err
	}
	if err := b.GatherRows(x, stage, pidx, n, width); err != nil {
		b.Free(x)
		return nil, false, err
	}
	return x, true, nil
}

// hotCounts sums the devices' reads and hot reads (a shared copy once).
func hotCounts(hot []*hotRows) (hits, reads int64) {
	for d, h := range hot {
		if h != nil && slices.Index(hot, h) == d {
			hits += h.hits.Load()
			reads += h.reads.Load()
		}
	}
	return hits, reads
}
