package cudadsp

import (
	"fmt"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/tensor/backend"
)

// ShardMachine is cache.ShardMachine on a GPU: a feature.Store over the
// machine's shard (its cached rows in device memory, the rest pinned and
// read through UVA, indexed by global ID minus the shard's start; the
// held rows of other machines in device memory after them,
// feature.Options.Extra), and a mapped pinned staging buffer for the
// other rows of other machines, which the gather kernel reads by a
// per-batch slot map (-1: the shard's row, -2-j: held row j); the kernel
// applies the input dropout as it writes (feature.GatherStaged).
type ShardMachine struct {
	dev     routeDevice
	s       *feature.Store
	cols    int
	held    []int32
	pin     backend.HostBuffer // staged rows (float32), then the positions (int32)
	capVals int                // float32 values the staged part holds
	capPos  int
	fence   backend.Fence
	n, rows int // of the last Stage
}

var _ cache.ShardMachine = (*ShardMachine)(nil)

// NewShardMachine keeps the shard x (rows [lo, hi), cols wide) on dev,
// and in device memory c's rows: its own (as NewStore does) and its held
// rows of other machines (c nil: nothing in device memory).
func NewShardMachine(b backend.Backend, x []float32, lo, hi, cols int, c *cache.ShardCache, onUpload func(int64)) (*ShardMachine, error) {
	dev, ok := b.(routeDevice)
	if !ok {
		return nil, fmt.Errorf("cudadsp: %s lacks the kernels, queue, pinned memory or fences of a shard store", b.Name())
	}
	if lo < 0 || hi < lo || cols <= 0 || len(x) != (hi-lo)*cols {
		return nil, fmt.Errorf("%w: shard of %d values for rows [%d, %d) x %d", cache.ErrInput, len(x), lo, hi, cols)
	}
	if c == nil {
		c = &cache.ShardCache{}
	}
	if len(c.HeldAt) != len(c.Held) {
		return nil, fmt.Errorf("%w: %d held rows at %d places", cache.ErrInput, len(c.Held), len(c.HeldAt))
	}
	local := make([]graph.NodeID, 0, len(c.Own))
	for _, v := range c.Own {
		if int(v) < lo || int(v) >= hi {
			return nil, fmt.Errorf("%w: own row %d not in the shard [%d, %d)", cache.ErrInput, v, lo, hi)
		}
		local = append(local, v-graph.NodeID(lo))
	}
	rows := hi - lo
	vb := cache.ValueBytes(dev.Precision())
	var budget int64
	if len(local) > 0 {
		budget = 4*int64(rows) + vb*int64(len(local))*int64(cols)
	}
	s, err := feature.New(dev, x, rows, cols, feature.Options{BudgetBytes: budget, Hot: local, BFloat16: vb == 2, OnUpload: onUpload, Offset: int64(lo),
		Extra: c.HeldX, ExtraRows: c.HeldAt})
	if err != nil {
		return nil, err
	}
	m := &ShardMachine{dev: dev, s: s, cols: cols, held: c.Held}
	if m.fence, err = dev.NewFence(); err != nil {
		s.Close()
		return nil, err
	}
	return m, nil
}

// stagedOff is where the positions start in the pinned buffer: after
// vals float32 values, rounded up to 16 bytes.
func stagedOff(vals int) int { return (4*vals + 15) &^ 15 }

func (m *ShardMachine) Stage(n, staged int) ([]int32, []float32, error) {
	if n <= 0 || staged < 0 || staged > n {
		return nil, nil, fmt.Errorf("%w: staging %d rows for %d positions", cache.ErrInput, staged, n)
	}
	vals := staged * m.cols
	if m.pin == nil || vals > m.capVals || n > m.capPos {
		if m.pin != nil {
			// Freed after the queued gathers that read it.
			if err := m.pin.Free(); err != nil {
				return nil, nil, err
			}
			m.pin = nil
		}
		cv, cp := max(vals, 2*m.capVals), max(n, 2*m.capPos)
		pin, err := m.dev.AllocPinned(uint64(stagedOff(cv)+4*cp), true)
		if err != nil {
			return nil, nil, fmt.Errorf("cudadsp: staging %d remote rows: %w", staged, err)
		}
		m.pin, m.capVals, m.capPos = pin, cv, cp
	}
	m.n, m.rows = n, staged
	off := stagedOff(m.capVals) / 4
	return m.pin.Int32s()[off : off+n], m.pin.Float32s()[:vals], nil
}

func (m *ShardMachine) GatherStaged(dst, nodes backend.Buffer, n, staged int, p float32, seed uint64) error {
	if m.pin == nil || n != m.n || staged != m.rows {
		return fmt.Errorf("%w: gather of %d rows (%d staged) after staging %d (%d)", cache.ErrInput, n, staged, m.n, m.rows)
	}
	base := m.pin.DeviceAddr()
	if base == 0 {
		return fmt.Errorf("cudadsp: the staging buffer is not mapped")
	}
	if err := m.s.GatherStaged(dst, nodes, base+backend.DevPtr(stagedOff(m.capVals)), base, int64(staged), p, seed); err != nil {
		return err
	}
	// The staging memory is written again by the next batch: wait for
	// this gather (without the device lock).
	if err := m.fence.Record(); err != nil {
		return err
	}
	return m.fence.Wait()
}

func (m *ShardMachine) Held() []int32      { return m.held }
func (m *ShardMachine) HotRows() int       { return m.s.HotRows() }
func (m *ShardMachine) DeviceBytes() int64 { return m.s.DeviceBytes() }

func (m *ShardMachine) Close() error {
	var errs []error
	if m.pin != nil {
		errs = append(errs, m.pin.Free())
		m.pin = nil
	}
	if m.fence != nil {
		errs = append(errs, m.fence.Close())
		m.fence = nil
	}
	errs = append(errs, m.s.Close())
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
