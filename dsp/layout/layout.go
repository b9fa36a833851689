package layout

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/partition/book"
)

// Place says where a row of the topology lives.
type Place uint8

const (
	// Device memory of the device owning the row.
	Device Place = iota
	// Host memory (pinned, read through UVA on GPUs).
	Host
)

func (p Place) String() string {
	if p == Device {
		return "device"
	}
	return "host"
}

// NoLimit as Options.DeviceBytes keeps every row in device memory.
const NoLimit = -1

// Options configure a Patch.
type Options struct {
	// DeviceBytes bounds the topology bytes placed in device memory: a row
	// of degree d costs 8 + 4d bytes (offset and neighbor IDs), plus 4d
	// for edge weights when the graph has them. Rows that do not fit stay
	// in host memory. NoLimit (or any negative value) places every row on
	// the device; 0 places none.
	DeviceBytes int64
}

// ErrInput is wrapped by every error about bad arguments.
var ErrInput = errors.New("layout: invalid input")

func inputErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInput, fmt.Sprintf(format, args...))
}

// Patch is the topology held by one device: the in-adjacency rows of the
// global IDs [Lo, Hi), adjacency in global IDs. It is immutable and safe
// for concurrent use.
type Patch struct {
	Rank   int
	Lo, Hi graph.NodeID
	// Graph is a NumNodes x NumNodes CSR whose rows outside [Lo, Hi) are
	// empty and whose rows inside are those of the input graph (shared).
	Graph *graph.CSR
	// EdgeBase is the global edge ID of the patch's first edge: edge e of
	// Graph is edge EdgeBase+e of the input graph.
	EdgeBase int64

	place       []Place // per row of the patch (v - Lo)
	deviceBytes int64
	hostBytes   int64
	deviceRows  int
}

// Build cuts device rank's patch out of the in-adjacency in (row v lists
// the sources of v's incoming edges, global IDs): the rows that b assigns
// to rank. in must be valid and square with b.NumNodes() nodes.
func Build(in *graph.CSR, b *book.Book, rank int, opt Options) (*Patch, error) {
	if err := check(in, b); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= b.K() {
		return nil, inputErr("rank %d not in [0, %d)", rank, b.K())
	}
	return build(in, b, rank, opt), nil
}

// BuildAll builds every rank's patch (Build for each), checking in once
// (a pass over every edge) and building the patches concurrently: patch
// r is the one Build gives for rank r.
func BuildAll(in *graph.CSR, b *book.Book, opt Options) ([]*Patch, error) {
	if err := check(in, b); err != nil {
		return nil, err
	}
	ps := make([]*Patch, b.K())
	var wg sync.WaitGroup
	for r := range ps {
		wg.Go(func() { ps[r] = build(in, b, r, opt) })
	}
	wg.Wait()
	return ps, nil
}

// BuildRanks is BuildAll for the given ranks only (a process's own in a
// job of several): patch r is Build's for rank r where r is in ranks, nil
// for the others.
func BuildRanks(in *graph.CSR, b *book.Book, ranks []int, opt Options) ([]*Patch, error) {
	if err := check(in, b); err != nil {
		return nil, err
	}
	for _, r := range ranks {
		if r < 0 || r >= b.K() {
			return nil, inputErr("rank %d not in [0, %d)", r, b.K())
		}
	}
	ps := make([]*Patch, b.K())
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { ps[r] = build(in, b, r, opt) })
	}
	wg.Wait()
	return ps, nil
}

// check validates Build's inputs but the rank.
func check(in *graph.CSR, b *book.Book) error {
	if in == nil || b == nil {
		return inputErr("nil graph or book")
	}
	if err := in.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	if in.NumRows != in.NumCols {
		return inputErr("graph is %d x %d, not square", in.NumRows, in.NumCols)
	}
	if b.NumNodes() != in.NumRows {
		return inputErr("book covers %d nodes, graph has %d", b.NumNodes(), in.NumRows)
	}
	return nil
}

// build cuts rank's patch out of in (checked).
func build(in *graph.CSR, b *book.Book, rank int, opt Options) *Patch {
	lo, hi := b.Range(rank)
	n := in.NumRows
	base := in.Indptr[lo]
	indptr := make([]int64, n+1)
	for v := lo; v < hi; v++ {
		indptr[v+1] = in.Indptr[v+1] - base
	}
	end := in.Indptr[hi] - base
	for v := hi; v < n; v++ {
		indptr[v+1] = end
	}
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: indptr, Indices: in.Indices[base:in.Indptr[hi]:in.Indptr[hi]]}
	if in.Weights != nil {
		g.Weights = in.Weights[base:in.Indptr[hi]:in.Indptr[hi]]
	}
	p := &Patch{Rank: rank, Lo: graph.NodeID(lo), Hi: graph.NodeID(hi), Graph: g, EdgeBase: base}
	p.placeRows(opt.DeviceBytes)
	return p
}

// BuildWhole lays out the whole graph in as the single patch of a
// one-device partition (the rows that fit opt.DeviceBytes on the device).
func BuildWhole(in *graph.CSR, opt Options) (*Patch, *book.Book, error) {
	if in == nil {
		return nil, nil, inputErr("nil graph")
	}
	b, err := book.New([]int64{0, in.NumRows})
	if err != nil {
		return nil, nil, inputErr("%v", err)
	}
	p, err := Build(in, b, 0, opt)
	return p, b, err
}

// rowBytes is the memory a row of degree d takes.
func (p *Patch) rowBytes(d int64) int64 {
	c := 8 + 4*d
	if p.Graph.Weights != nil {
		c += 4 * d
	}
	return c
}

// placeRows puts the longest rows on the device until the budget is spent
// (ties by ID), the rest in host memory.
func (p *Patch) placeRows(budget int64) {
	rows := int(p.Hi - p.Lo)
	p.place = make([]Place, rows)
	g := p.Graph
	deg := func(i int) int64 { v := int(p.Lo) + i; return g.Indptr[v+1] - g.Indptr[v] }
	if budget < 0 {
		for i := range rows {
			p.deviceBytes += p.rowBytes(deg(i))
		}
		p.deviceRows = rows
		return
	}
	order := make([]int32, rows)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		da, db := deg(int(a)), deg(int(b))
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	left := budget
	for _, i := range order {
		c := p.rowBytes(deg(int(i)))
		if c <= left {
			left -= c
			p.deviceBytes += c
			p.deviceRows++
			continue
		}
		p.place[i] = Host
		p.hostBytes += c
	}
}

// DeviceRowIDs lists the rows placed in device memory (global IDs, in ID
// order).
func (p *Patch) DeviceRowIDs() []graph.NodeID {
	out := make([]graph.NodeID, 0, p.deviceRows)
	for i, pl := range p.place {
		if pl == Device {
			out = append(out, p.Lo+graph.NodeID(i))
		}
	}
	return out
}

// Owns reports whether v is one of the patch's rows.
func (p *Patch) Owns(v graph.NodeID) bool { return v >= p.Lo && v < p.Hi }

// Place returns where row v lives; v must be owned by the patch.
func (p *Patch) Place(v graph.NodeID) Place { return p.place[v-p.Lo] }

// NumRows is the number of rows the patch owns.
func (p *Patch) NumRows() int { return int(p.Hi - p.Lo) }

// NumEdges is the number of entries in the patch's rows.
func (p *Patch) NumEdges() int64 { return int64(len(p.Graph.Indices)) }

// DeviceRows, DeviceBytes and HostBytes describe the placement.
func (p *Patch) DeviceRows() int { return p.deviceRows }

// DeviceBytes is the topology held in device memory.
func (p *Patch) DeviceBytes() int64 { return p.deviceBytes }

// HostBytes is the topology left in host memory.
func (p *Patch) HostBytes() int64 { return p.hostBytes }
