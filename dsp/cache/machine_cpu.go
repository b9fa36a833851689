package cache

import (
	"fmt"

	"github.com/strata-gnn/strata/tensor/backend"
)

// The loader's counts per batch (machine.route): bins 0..k-1 count the
// IDs each device serves (the loader's own bin includes its cold rows),
// bin k the cold rows, bin k+1 the IDs outside [0, rows).
func binCold(k int) int { return k }
func binBad(k int) int  { return k + 1 }

// Machine runs the loader's routing steps on one back end: kernels on a
// GPU (the registered device machine), or their host mirror
// (hostMachine) on any other back end, which is how CI covers the
// loader's protocol.
type Machine interface {
	// Route queues the bin counts of ids[0:n) and, when grouped and pos
	// are not nil (n int32 each), the grouping: the IDs of bin rank
	// first, then each peer's in rank order (bad IDs left out), pos[j]
	// the batch position of grouped[j]. The order inside a bin is
	// unspecified.
	Route(ids backend.Buffer, n int, grouped, pos backend.Buffer) error
	// Counts waits for the work queued so far and returns the last
	// Route's k+2 counts.
	Counts() ([]int64, error)
	// Scatter queues x[pos[j]] = stage[j] for rows j < n of cols floats,
	// with input dropout at rate p (0: none) and mask seed seed: value c
	// of row j is multiplied by the mask value of flat index
	// pos[j]*cols + c (backend.Dropout's rule, see Dropout). stage is
	// float32; x float32, or bfloat16 (each value rounded to nearest
	// even after its dropout: LoaderConfig.BFloat16Rows).
	Scatter(x, stage, pos backend.Buffer, n, cols int, p float32, seed uint64) error
	Close() error
}

// DeviceMachine returns the routing machine of a device back end for
// the holder table (a byte per node: the device serving it, -1 cold), k
// devices, this rank and rows nodes, or nil, nil when be is not a device
// it runs on. Package internal/cudadsp registers the CUDA one.
type DeviceMachine func(be backend.Backend, holder []int8, k, rank, rows int) (Machine, error)

var deviceMachine DeviceMachine

// RegisterDevice makes loaders use f's machines on the back ends it
// takes. It is meant for an init function; it panics when called twice.
func RegisterDevice(f DeviceMachine) {
	if f == nil || deviceMachine != nil {
		panic("cache: RegisterDevice called twice or with nil")
	}
	deviceMachine = f
}

// newMachine is the registered device machine of be, or the host mirror.
func newMachine(be backend.Backend, holder []int8, k, rank, rows int) (Machine, error) {
	if deviceMachine != nil {
		if m, err := deviceMachine(be, holder, k, rank, rows); m != nil || err != nil {
			return m, err
		}
	}
	return &hostMachine{b: be, holder: holder, k: k, rank: rank, rows: rows}, nil
}

// hostMachine is the host mirror of the kernels in route.cu, for back
// ends whose buffers Download and Upload reach. Its grouping is stable
// (batch order inside a bin).
type hostMachine struct {
	b             backend.Backend
	holder        []int8
	k, rank, rows int
	last          []int64
}

func (h *hostMachine) Route(ids backend.Buffer, n int, grouped, pos backend.Buffer) error {
	k := h.k
	cnt := make([]int64, k+2)
	h.last = nil
	v := make([]int32, n)
	if n > 0 {
		if err := h.b.Download(v, ids); err != nil {
			return err
		}
	}
	bin := make([]int, n)
	for i, x := range v {
		if x < 0 || int(x) >= h.rows {
			cnt[binBad(k)]++
			bin[i] = -1
			continue
		}
		d := int(h.holder[x])
		if d < 0 {
			cnt[binCold(k)]++
			d = h.rank
		}
		cnt[d]++
		bin[i] = d
	}
	h.last = cnt
	if grouped == nil {
		return nil
	}
	start := make([]int64, k)
	s := cnt[h.rank]
	for p := range k {
		if p != h.rank {
			start[p] = s
			s += cnt[p]
		}
	}
	g, ps := make([]int32, n), make([]int32, n)
	for i, d := range bin {
		if d < 0 {
			continue
		}
		j := start[d]
		start[d]++
		g[j], ps[j] = v[i], int32(i)
	}
	if n == 0 {
		return nil
	}
	if grouped.Len() != n || pos.Len() != n {
		return fmt.Errorf("%w: grouping %d IDs into buffers of %d and %d", ErrInput, n, grouped.Len(), pos.Len())
	}
	if err := h.b.Upload(grouped, g); err != nil {
		return err
	}
	return h.b.Upload(pos, ps)
}

func (h *hostMachine) Counts() ([]int64, error) {
	if h.last == nil {
		return nil, fmt.Errorf("cache: counts before a route")
	}
	return h.last, nil
}

func (h *hostMachine) Scatter(x, stage, pos backend.Buffer, n, cols int, p float32, seed uint64) error {
	if n == 0 {
		return nil
	}
	if err := backend.CheckDropoutRate("cache.Scatter", p); err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	if dt := x.DType(); dt != backend.Float32 && dt != backend.BFloat16 {
		return fmt.Errorf("%w: scatter into a %s buffer, want float32 or bfloat16", ErrInput, dt)
	}
	in := make([]float32, stage.Len())
	ps := make([]int32, pos.Len())
	out := make([]float32, x.Len())
	if err := h.b.Download(in, stage); err != nil {
		return err
	}
	if err := h.b.Download(ps, pos); err != nil {
		return err
	}
	if n*cols > len(in) || n > len(ps) {
		return fmt.Errorf("%w: scatter of %d rows from %d values and %d positions", ErrInput, n, len(in), len(ps))
	}
	for j := range n {
		d := int(ps[j])
		if d < 0 || (d+1)*cols > len(out) {
			return fmt.Errorf("%w: scatter position %d of %d rows", ErrInput, d, len(out)/max(cols, 1))
		}
		row := out[d*cols : (d+1)*cols]
		copy(row, in[j*cols:(j+1)*cols])
		dropRows(row, d*cols, p, seed)
	}
	return uploadRows(h.b, x, out)
}

func (h *hostMachine) Close() error { return nil }
