package cache

import (
	"fmt"

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
// host copy, with the input dropout of GatherDropout applied as it writes. The ShardMachine is the part a back end supplies: a host one
// here (NewHostShard), a CUDA one in internal/cudadsp (a slot map read by
// the gather kernel: device cache, pinned shard through UVA, or pinned
// staging).

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
	GatherStaged(dst, nodes backend.Buffer, n, staged int, p float32, seed uint64) error
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
	ids        []int32
	pos        []int32
	uniq       []int32
	at         map[int32]int32
}

// NewShardStore returns the store of a machine owning rows [lo, hi) of a
// rows x cols table: m gathers the shard's rows, src fetches the others.
func NewShardStore(b backend.Backend, m ShardMachine, src RowSource, rows, cols, lo, hi int) (*ShardStore, error) {
	switch {
	case b == nil || m == nil || src == nil:
		return nil, fmt.Errorf("%w: shard store without a back end, machine or row source", ErrInput)
	case rows < 0 || cols <= 0 || lo < 0 || lo > hi || hi > rows:
		return nil, fmt.Errorf("%w: shard [%d, %d) of a %d x %d table", ErrInput, lo, hi, rows, cols)
	}
	return &ShardStore{b: b, m: m, src: src, rows: rows, cols: cols, lo: lo, hi: hi, at: map[int32]int32{}}, nil
}

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
	if err := s.b.Download(s.ids, nodes); err != nil {
		return err
	}
	s.pos, s.uniq = grow(s.pos, n), s.uniq[:0]
	clear(s.at)
	for i, v := range s.ids {
		switch {
		case v < 0 || int(v) >= s.rows:
			return fmt.Errorf("%w: node %d (position %d) not in [0, %d)", ErrInput, v, i, s.rows)
		case int(v) >= s.lo && int(v) < s.hi:
			s.pos[i] = -1
		default:
			j, ok := s.at[v]
			if !ok {
				j = int32(len(s.uniq))
				s.at[v] = j
				s.uniq = append(s.uniq, v)
			}
			s.pos[i] = j
		}
	}
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
// ask it for, in the order it will ask (an ID out of range is left out:
// that gather fails). A no-op when the source does not prefetch. Safe
// to call while another goroutine gathers.
func (s *ShardStore) Prefetch(nodes []int32) {
	p, ok := s.src.(Prefetcher)
	if !ok {
		return
	}
	seen := make(map[int32]struct{}, len(nodes)/2)
	var uniq []int32
	for _, v := range nodes {
		if v < 0 || int(v) >= s.rows || int(v) >= s.lo && int(v) < s.hi {
			continue
		}
		if _, ok := seen[v]; !ok {
			seen[v] = struct{}{}
			uniq = append(uniq, v)
		}
	}
	if len(uniq) > 0 {
		p.Prefetch(uniq)
	}
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

// HostShard is the ShardMachine of back ends whose buffers the host
// reads and writes (Download, Upload): the shard is a host table (its
// cache notional, as HostStore's).
type HostShard struct {
	b      backend.Backend
	x      []float32 // (hi-lo) x cols, shared, not copied
	lo, hi int
	cols   int
	hot    int
	pos    []int32
	rows   []float32
	ids    []int32
	out    []float32
}

// NewHostShard returns the host machine of the shard x of rows [lo, hi),
// cols wide; hot is the rows the device would cache (HotRows).
func NewHostShard(b backend.Backend, x []float32, lo, hi, cols, hot int) (*HostShard, error) {
	if b == nil || cols <= 0 || lo < 0 || hi < lo || len(x) != (hi-lo)*cols || hot < 0 {
		return nil, fmt.Errorf("%w: host shard of %d values for rows [%d, %d) x %d", ErrInput, len(x), lo, hi, cols)
	}
	return &HostShard{b: b, x: x, lo: lo, hi: hi, cols: cols, hot: hot}, nil
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
		if p := h.pos[i]; p >= 0 {
			if int(p) >= staged {
				return fmt.Errorf("%w: staged row %d (position %d) of %d", ErrInput, p, i, staged)
			}
			row = h.rows[int(p)*c : (int(p)+1)*c]
		} else {
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

func (h *HostShard) HotRows() int { return h.hot }
func (h *HostShard) DeviceBytes() int64 {
	return ValueBytes(h.b.Precision()) * int64(h.hot) * int64(h.cols)
}
func (h *HostShard) Close() error { return nil }
