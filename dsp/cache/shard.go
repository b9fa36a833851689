package cache

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The per-machine layout (package dsp/machines): a process holds only
// its machine's shard of the feature table, rows [Lo, Hi); every other
// row is asked of the machine that owns it. A ShardStore is the device
// store of that layout, one algorithm on every back end: per gather it
// downloads the batch's IDs, finds the rows of other machines,
// deduplicates them, has its RowSource fetch them (batched per machine,
// with the remote-row cache: dsp/machines' Service) into the staging
// memory of its ShardMachine, and the machine then fills the batch in one
// pass: staged rows from staging, the shard's own rows from its cache or
// host copy, with the input dropout of GatherDropout applied as it writes.
// The ShardMachine is the part a back end supplies: a host one here
// (NewHostShard), a CUDA one in internal/cudadsp (a slot map read by the
// gather kernel: device cache, pinned shard through UVA, or pinned
// staging).
//
// A machine directory also carries hot rows of other machines (the
// globally hottest rows, dsp/machines' hot.go): local data, so a device
// keeps them in device memory like its own rows (ShardCache: the cache
// plan's rows the machine holds, then the other hot rows, hottest first,
// within the device's cache budget). A batch position of such a row names
// its row among the machine's held rows in the slot map (HeldPos), and
// only the rows neither the shard's nor held are staged.

// ShardMachine gathers a batch's rows on one device from the machine's
// shard and from rows staged by the host.
type ShardMachine interface {
	// Stage returns the host memory the next GatherStaged reads: pos, n
	// batch positions, and rows, staged x cols values. It stays valid
	// until that GatherStaged returns.
	Stage(n, staged int) (pos []int32, rows []float32, err error)
	// GatherStaged writes row i of dst (float32, n x cols) for each batch
	// position i: row pos[i] of the staged rows when pos[i] >= 0, else
	// the shard's row of node nodes[i] (a global ID in [Lo, Hi)), each
	// value times its dropout mask value (Store.GatherDropout's rule; p
	// in [0, 1), checked by the caller; 0 writes the rows as they are).
	// It returns once the staged memory may be written again.
	// A position pos[i] <= -2 reads held row HeldPos(pos[i]) instead
	// (a row of another machine the machine keeps: Held).
	GatherStaged(dst, nodes backend.Buffer, n, staged int, p float32, seed uint64) error
	// Held lists the rows of other machines (global IDs) the machine
	// keeps in device memory, in held-row order.
	Held() []int32
	HotRows() int
	DeviceBytes() int64
	Close() error
}

// ShardStore is a Store over a machine's shard (see above).
type ShardStore struct {
	b          backend.Backend
	m          ShardMachine
	src        RowSource
	rows, cols int
	lo, hi     int
	held       map[int32]int32 // row of another machine kept by m -> its held row
	ids        []int32
	pos        []int32
	uniq       []int32
	at         map[int32]int32
	// Rows of other machines the gathers read: from m's held rows, and
	// staged (each distinct row of a batch once).
	heldHits, stagedRows atomic.Int64
}

// HeldPos is the slot map's value for held row j (and its inverse: the
// held row of a value <= -2): -1 is the shard's row, >= 0 a staged row.
func HeldPos(j int32) int32 { return -2 - j }

// NewShardStore returns the store of a machine owning rows [lo, hi) of a
// rows x cols table: m gathers the shard's rows, src fetches the others.
func NewShardStore(b backend.Backend, m ShardMachine, src RowSource, rows, cols, lo, hi int) (*ShardStore, error) {
	switch {
	case b == nil || m == nil || src == nil:
		return nil, fmt.Errorf("%w: shard store without a back end, machine or row source", ErrInput)
	case rows < 0 || cols <= 0 || lo < 0 || lo > hi || hi > rows:
		return nil, fmt.Errorf("%w: shard [%d, %d) of a %d x %d table", ErrInput, lo, hi, rows, cols)
	}
	held := make(map[int32]int32, len(m.Held()))
	for j, v := range m.Held() {
		if v < 0 || int(v) >= rows || int(v) >= lo && int(v) < hi {
			return nil, fmt.Errorf("%w: held row %d (entry %d) is not another machine's row of [0, %d)", ErrInput, v, j, rows)
		}
		if _, ok := held[v]; ok {
			return nil, fmt.Errorf("%w: held row %d listed twice", ErrInput, v)
		}
		held[v] = int32(j)
	}
	return &ShardStore{b: b, m: m, src: src, rows: rows, cols: cols, lo: lo, hi: hi, held: held, at: map[int32]int32{}}, nil
}

// Served is the number of rows of other machines the gathers read from
// the machine's held rows (device memory) and staged (fetched by the row
// source, each distinct row of a batch once).
func (s *ShardStore) Served() (held, staged int64) { return s.heldHits.Load(), s.stagedRows.Load() }

// Gather writes the rows of nodes into dst (see Store).
func (s *ShardStore) Gather(dst, nodes backend.Buffer) error {
	return s.gather(dst, nodes, 0, 0)
}

// GatherDropout is Gather with input dropout (see Store), applied by the
// machine's gather as it writes the rows: one pass, no mask.
func (s *ShardStore) GatherDropout(dst, nodes backend.Buffer, p float32, seed uint64) error {
	if err := backend.CheckDropoutRate("cache.ShardStore.GatherDropout", p); err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	return s.gather(dst, nodes, p, seed)
}

func (s *ShardStore) gather(dst, nodes backend.Buffer, p float32, seed uint64) error {
	if nodes == nil || dst == nil || nodes.DType() != backend.Int32 {
		return fmt.Errorf("%w: shard gather needs an int32 node buffer and a destination", ErrInput)
	}
	n := nodes.Len()
	if dst.Len() != n*s.cols {
		return fmt.Errorf("%w: gather of %d rows x %d into %d values", ErrInput, n, s.cols, dst.Len())
	}
	if n == 0 {
		return nil
	}
	s.ids = grow(s.ids, n)
	err := s.b.Download(s.ids, nodes)
	if err != nil {
		return err
	}
	s.pos = grow(s.pos, n)
	var held int64
	if s.uniq, held, err = s.slots(s.ids, s.pos, s.uniq[:0], s.at); err != nil {
		return err
	}
	s.heldHits.Add(held)
	s.stagedRows.Add(int64(len(s.uniq)))
	pos, rows, err := s.m.Stage(n, len(s.uniq))
	if err != nil {
		return err
	}
	if len(pos) != n || len(rows) != len(s.uniq)*s.cols {
		return fmt.Errorf("%w: staging of %d positions and %d values for %d rows x %d", ErrInput, len(pos), len(rows), len(s.uniq), s.cols)
	}
	copy(pos, s.pos)
	if len(s.uniq) > 0 {
		if err := s.src.Gather(s.uniq, rows); err != nil {
			return err
		}
	}
	return s.m.GatherStaged(dst, nodes, n, len(s.uniq), p, seed)
}

// Prefetcher is a RowSource that can start fetching rows ahead of the
// Gather that asks for them (dsp/machines' Source).
type Prefetcher interface {
	// Prefetch starts fetching the rows of ids for a later Gather of the
	// same IDs in the same order.
	Prefetch(ids []int32)
}

// Prefetch tells a Prefetcher row source of the rows of other machines
// that a gather of nodes (host IDs) comes next: the rows the gather will
// ask it for, in the order it will ask (IDs out of range left out: that
// gather fails; the machine's held rows left out: it reads them itself). A no-op when the
// source does not prefetch. Safe to call while another goroutine
// gathers.
func (s *ShardStore) Prefetch(nodes []int32) {
	p, ok := s.src.(Prefetcher)
	if !ok {
		return
	}
	ok = true
	for _, v := range nodes {
		ok = ok && v >= 0 && int(v) < s.rows
	}
	if !ok { // the gather of nodes fails: prefetch the others
		nodes = slices.DeleteFunc(slices.Clone(nodes), func(v int32) bool { return v < 0 || int(v) >= s.rows })
	}
	uniq, _, err := s.slots(nodes, nil, nil, make(map[int32]int32, len(nodes)/2))
	if err == nil && len(uniq) > 0 {
		p.Prefetch(uniq)
	}
}

// slots is the slot map of a gather of ids (host IDs) into pos (nil: not
// written): -1 for a row of the shard, HeldPos(j) for held row j, else
// the row's place among the distinct rows to stage, appended to uniq in
// first-seen order (at: their places, cleared first). held is the
// positions read from held rows. One function for Gather and Prefetch:
// a prefetch asks the source for exactly the list the gather will.
func (s *ShardStore) slots(ids, pos, uniq []int32, at map[int32]int32) ([]int32, int64, error) {
	clear(at)
	var held int64
	for i, v := range ids {
		p := int32(-1)
		switch {
		case v < 0 || int(v) >= s.rows:
			return uniq, held, fmt.Errorf("%w: node %d (position %d) not in [0, %d)", ErrInput, v, i, s.rows)
		case int(v) >= s.lo && int(v) < s.hi:
		default:
			if j, ok := s.held[v]; ok {
				p = HeldPos(j)
				held++
				break
			}
			j, ok := at[v]
			if !ok {
				j = int32(len(uniq))
				at[v] = j
				uniq = append(uniq, v)
			}
			p = j
		}
		if pos != nil {
			pos[i] = p
		}
	}
	return uniq, held, nil
}

func (s *ShardStore) HotRows() int       { return s.m.HotRows() }
func (s *ShardStore) DeviceBytes() int64 { return s.m.DeviceBytes() }
func (s *ShardStore) Close() error       { return s.m.Close() }

// grow returns x resized to n, reallocated only when it is too small.
func grow[T any](x []T, n int) []T {
	if cap(x) < n {
		return make([]T, n)
	}
	return x[:n]
}

// ShardCache is what a shard machine keeps in device memory: Own, rows
// of its shard (global IDs, in cache order), and Held, rows of other
// machines (global IDs, in held-row order) whose values are rows HeldAt
// of HeldX (the machine directory's hot rows, cols wide; shared, not
// copied).
type ShardCache struct {
	Own    []graph.NodeID
	Held   []int32
	HeldAt []int32
	HeldX  []float32
}

// NewShardCache chooses what a device of a machine owning rows [lo, hi)
// of a rows-row table keeps in device memory, capacity rows in all
// (negative: no limit): the rows of plan (the device's rows of the cache
// plan, in its order) the machine holds (its own, and those of hotIDs,
// its rows of other machines, whose values are hotX, cols wide), then
// the other rows of hotIDs in their order (hottest first: they are local
// data, as good as the shard's rows). A rows x cols table whose plan
// caches every row (the default budget) keeps the whole shard and every
// hot row.
func NewShardCache(plan []graph.NodeID, hotIDs []int32, hotX []float32, rows, cols, lo, hi, capacity int) (*ShardCache, error) {
	if cols <= 0 || lo < 0 || lo > hi || hi > rows || len(hotX) != len(hotIDs)*cols {
		return nil, fmt.Errorf("%w: shard cache of rows [%d, %d) of %d, %d hot rows of %d values x %d", ErrInput, lo, hi, rows, len(hotIDs), len(hotX), cols)
	}
	hot := make(map[int32]int32, len(hotIDs))
	for i, v := range hotIDs {
		if v < 0 || int(v) >= rows || int(v) >= lo && int(v) < hi {
			return nil, fmt.Errorf("%w: hot row %d (entry %d) is not another machine's row of [0, %d)", ErrInput, v, i, rows)
		}
		if _, ok := hot[v]; ok {
			return nil, fmt.Errorf("%w: hot row %d listed twice", ErrInput, v)
		}
		hot[v] = int32(i)
	}
	if capacity < 0 {
		capacity = math.MaxInt
	}
	c := &ShardCache{HeldX: hotX}
	taken := make(map[int32]bool, len(hotIDs))
	for i, v := range plan {
		if len(c.Own)+len(c.Held) >= capacity {
			return c, nil
		}
		switch {
		case v < 0 || int(v) >= rows:
			return nil, fmt.Errorf("%w: plan row %d (entry %d) not in [0, %d)", ErrInput, v, i, rows)
		case int(v) >= lo && int(v) < hi:
			c.Own = append(c.Own, v)
		default:
			if j, ok := hot[int32(v)]; ok && !taken[int32(v)] {
				taken[int32(v)] = true
				c.Held, c.HeldAt = append(c.Held, int32(v)), append(c.HeldAt, j)
			}
		}
	}
	for j, v := range hotIDs {
		if len(c.Own)+len(c.Held) >= capacity {
			break
		}
		if !taken[v] {
			c.Held, c.HeldAt = append(c.Held, v), append(c.HeldAt, int32(j))
		}
	}
	return c, nil
}

// heldRow is held row j's values.
func (c *ShardCache) heldRow(j, cols int) []float32 {
	at := int(c.HeldAt[j]) * cols
	return c.HeldX[at : at+cols]
}

// check checks c against a machine's shard [lo, hi), cols wide.
func (c *ShardCache) check(lo, hi, cols int) error {
	if len(c.HeldAt) != len(c.Held) || len(c.HeldX)%cols != 0 {
		return fmt.Errorf("%w: %d held rows at %d places of %d values x %d", ErrInput, len(c.Held), len(c.HeldAt), len(c.HeldX), cols)
	}
	for i, v := range c.Own {
		if int(v) < lo || int(v) >= hi {
			return fmt.Errorf("%w: own row %d (entry %d) not in the shard [%d, %d)", ErrInput, v, i, lo, hi)
		}
	}
	for j, at := range c.HeldAt {
		if at < 0 || int(at) >= len(c.HeldX)/cols {
			return fmt.Errorf("%w: held row %d at hot row %d of %d", ErrInput, j, at, len(c.HeldX)/cols)
		}
	}
	return nil
}

// HostShard is the ShardMachine of back ends whose buffers the host
// reads and writes (Download, Upload): the shard is a host table (its
// cache notional, as HostStore's), the held rows read where they are.
type HostShard struct {
	b      backend.Backend
	x      []float32 // (hi-lo) x cols, shared, not copied
	lo, hi int
	cols   int
	c      ShardCache
	pos    []int32
	rows   []float32
	ids    []int32
	out    []float32
}

// NewHostShard returns the host machine of the shard x of rows [lo, hi),
// cols wide, keeping c (nil: nothing) as a device would.
func NewHostShard(b backend.Backend, x []float32, lo, hi, cols int, c *ShardCache) (*HostShard, error) {
	if b == nil || cols <= 0 || lo < 0 || hi < lo || len(x) != (hi-lo)*cols {
		return nil, fmt.Errorf("%w: host shard of %d values for rows [%d, %d) x %d", ErrInput, len(x), lo, hi, cols)
	}
	h := &HostShard{b: b, x: x, lo: lo, hi: hi, cols: cols}
	if c != nil {
		if err := c.check(lo, hi, cols); err != nil {
			return nil, err
		}
		h.c = *c
	}
	return h, nil
}

func (h *HostShard) Stage(n, staged int) ([]int32, []float32, error) {
	if n < 0 || staged < 0 || staged > n {
		return nil, nil, fmt.Errorf("%w: staging %d rows for %d positions", ErrInput, staged, n)
	}
	h.pos, h.rows = grow(h.pos, n), grow(h.rows, staged*h.cols)
	return h.pos, h.rows, nil
}

func (h *HostShard) GatherStaged(dst, nodes backend.Buffer, n, staged int, p float32, seed uint64) error {
	c := h.cols
	if n != len(h.pos) || staged*c != len(h.rows) || nodes.Len() != n || dst.Len() != n*c {
		return fmt.Errorf("%w: gather of %d rows (%d staged) after staging %d", ErrInput, n, staged, len(h.pos))
	}
	h.ids, h.out = grow(h.ids, n), grow(h.out, n*c)
	if err := h.b.Download(h.ids, nodes); err != nil {
		return err
	}
	for i, v := range h.ids {
		var row []float32
		switch p := h.pos[i]; {
		case p >= 0:
			if int(p) >= staged {
				return fmt.Errorf("%w: staged row %d (position %d) of %d", ErrInput, p, i, staged)
			}
			row = h.rows[int(p)*c : (int(p)+1)*c]
		case p < -1:
			j := int(HeldPos(p))
			if j >= len(h.c.Held) {
				return fmt.Errorf("%w: held row %d (position %d) of %d", ErrInput, j, i, len(h.c.Held))
			}
			row = h.c.heldRow(j, c)
		default:
			if int(v) < h.lo || int(v) >= h.hi {
				return fmt.Errorf("%w: node %d (position %d) not in the shard [%d, %d)", ErrInput, v, i, h.lo, h.hi)
			}
			l := int(v) - h.lo
			row = h.x[l*c : (l+1)*c]
		}
		copy(h.out[i*c:(i+1)*c], row)
	}
	dropRows(h.out, 0, p, seed)
	return h.b.Upload(dst, h.out)
}

func (h *HostShard) Held() []int32 { return h.c.Held }
func (h *HostShard) HotRows() int  { return len(h.c.Own) + len(h.c.Held) }
func (h *HostShard) DeviceBytes() int64 {
	return ValueBytes(h.b.Precision()) * int64(h.HotRows()) * int64(h.cols)
}
func (h *HostShard) Close() error { return nil }
