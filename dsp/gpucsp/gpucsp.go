package gpucsp

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

//go:embed csp.cu
var kernelSrc string

// Config configures a Sampler; Fanouts, Replace and Weighted mean what
// they mean in sample.Config and must be the same on every rank.
type Config struct {
	Fanouts           []int
	Replace, Weighted bool
	// EdgeIDs brings every sampled edge's global edge ID back (an extra
	// int64 all-to-all-v per hop). Without it Block.EdgeIDs holds -1 on
	// several ranks (a single rank fills them in: they cost nothing).
	EdgeIDs bool
	// Placement of the patch: gpusample.OnDevice (default) or Mapped
	// (pinned host memory read through UVA).
	Placement gpusample.Placement
}

// Stats counts what a Sampler has done since New.
type Stats struct {
	// BytesSent[p] is what this rank sent to rank p through the
	// communicator (0 for itself: its own share is a device copy, counted
	// in BytesLocal).
	BytesSent []int64
	// BytesLocal is the share each exchange kept on this rank.
	BytesLocal int64
	// Frontier[h] sums this rank's frontier sizes at hop h (hop 0: seeds).
	Frontier []int64
	// Exchanges counts collectives through the communicator.
	Exchanges int64
	// Batches counts successful Sample calls.
	Batches int64
}

// exchanger is the part of comm.DeviceComm the sampler uses.
type exchanger interface {
	AllToAll(ctx context.Context, dst, src backend.Buffer) error
	AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error
}

// local is the exchanger of a single rank: its share is a device copy.
type local struct{ dev *cuda.Device }

func (x local) AllToAll(_ context.Context, dst, src backend.Buffer) error {
	return x.dev.Copy(dst, src)
}
func (x local) AllToAllV(_ context.Context, dst backend.Buffer, _ []int, src backend.Buffer, _ []int) error {
	return x.dev.Copy(dst, src)
}

// Sampler is one rank's collective GPU sampler. Its methods serialize;
// Sample is a collective (see the package doc).
type Sampler struct {
	dev    *cuda.Device
	x      exchanger
	remote bool // x is a communicator
	// direct: a single rank samples its patch (the whole graph) with
	// gpusample.SampleDevice, the same batch without the protocol's
	// steps (tests turn it off to run the protocol on one device).
	direct     bool
	rank, size int
	n          int64   // nodes
	off        []int64 // partition offsets (P+1)
	rows       int64   // rows this rank owns
	edgeBase   int64
	cfg        Config

	gs   *gpusample.Sampler // over the patch
	st   *gpusample.Stepper
	fns  map[string]cu.Function
	offB *cuda.Buffer     // offsets on the device
	pin  *cuda.HostBuffer // small device-to-host reads

	mu     sync.Mutex
	stats  Stats
	closed bool
}

var kernels = []string{"csp_owner", "csp_gather", "csp_counts", "csp_totals", "csp_pack", "csp_add_i64", "csp_unpack_counts", "csp_unpack_src"}

// New prepares rank c.Rank()'s sampler: patch is that rank's layout.Patch
// (the in-adjacency rows it owns, global column IDs), offsets the
// partition's node offsets (len P+1, contiguous ID ranges), c the sampler
// stage's device communicator on dev (nil or Size()==1 means one device:
// no communication). The patch is copied to dev (cfg.Placement).
func New(dev *cuda.Device, patch *layout.Patch, offsets []int64, c comm.DeviceComm, cfg Config) (*Sampler, error) {
	const op = "gpucsp.New"
	rank, size := 0, 1
	if c != nil {
		rank, size = c.Rank(), c.Size()
	}
	bad := func(format string, args ...any) (*Sampler, error) {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	if patch == nil || patch.Graph == nil {
		return bad("nil patch")
	}
	b, err := book.New(offsets)
	if err != nil {
		return bad("offsets: %v", err)
	}
	if b.K() != size {
		return bad("%d parts in the offsets but the communicator has %d ranks", b.K(), size)
	}
	if patch.Rank != rank {
		return bad("patch of rank %d given to rank %d", patch.Rank, rank)
	}
	lo, hi := b.Range(rank)
	if int64(patch.Lo) != lo || int64(patch.Hi) != hi || patch.Graph.NumRows != b.NumNodes() {
		return bad("patch [%d, %d) of %d nodes does not match the offsets' range [%d, %d) of %d", patch.Lo, patch.Hi, patch.Graph.NumRows, lo, hi, b.NumNodes())
	}
	if len(cfg.Fanouts) == 0 || len(cfg.Fanouts) > 64 {
		return bad("%d fanouts: want 1 to 64 hops", len(cfg.Fanouts))
	}
	for i, f := range cfg.Fanouts {
		if f != -1 && f <= 0 {
			return bad("fanout %d of hop %d: want -1 (all) or > 0", f, i)
		}
	}
	if dev == nil {
		return bad("nil device")
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &Sampler{dev: dev, rank: rank, size: size, n: b.NumNodes(), off: b.Offsets(), rows: hi - lo,
		edgeBase: patch.EdgeBase, cfg: cfg, fns: map[string]cu.Function{}}
	s.stats.BytesSent = make([]int64, size)
	s.stats.Frontier = make([]int64, len(cfg.Fanouts))
	if c != nil && size > 1 {
		s.x, s.remote = c, true
	} else {
		s.x, s.direct = local{dev}, true
	}
	wrap := func(err error) (*Sampler, error) {
		s.Close()
		var ge *Error
		if errors.As(err, &ge) {
			return nil, err
		}
		kind := err
		if errors.Is(err, sample.ErrConfig) || errors.Is(err, sample.ErrGraph) {
			kind = fmt.Errorf("%w: %w", ErrInput, err)
		}
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Err: kind}
	}
	if s.gs, err = gpusample.New(dev, patch.Graph, gpusample.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Placement: cfg.Placement}); err != nil {
		return wrap(err)
	}
	if s.st, err = s.gs.Stepper(); err != nil {
		return wrap(err)
	}
	mod, err := dev.LoadModule("gpucsp", cuda.CommonSource()+kernelSrc)
	if err != nil {
		return wrap(err)
	}
	for _, name := range kernels {
		if s.fns[name], err = mod.Func(name); err != nil {
			return wrap(err)
		}
	}
	ob, err := dev.Alloc(backend.Int64, size+1)
	if err != nil {
		return wrap(err)
	}
	s.offB = ob.(*cuda.Buffer)
	if err := dev.Upload(s.offB, s.off); err != nil {
		return wrap(err)
	}
	if s.pin, err = dev.AllocHost(uint64(8*(2*hWords*size+8)), false); err != nil {
		return wrap(err)
	}
	return s, nil
}

// Rank and Size describe the sampler's group.
func (s *Sampler) Rank() int { return s.rank }

// Size is the number of ranks.
func (s *Sampler) Size() int { return s.size }

// NumHops is the number of blocks per batch.
func (s *Sampler) NumHops() int { return len(s.cfg.Fanouts) }

// Stats returns a copy of the counters.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.BytesSent = slices.Clone(s.stats.BytesSent)
	st.Frontier = slices.Clone(s.stats.Frontier)
	return st
}

// Close releases the patch copy and the sampler's buffers (not the
// communicator, nor batches already returned).
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	if s.gs != nil {
		first = s.gs.Close()
	}
	if s.offB != nil {
		s.dev.Free(s.offB)
	}
	if s.pin != nil {
		if err := s.pin.Free(); first == nil {
			first = err
		}
	}
	return first
}

func (s *Sampler) errf(hop int, kind error, format string, args ...any) *Error {
	return &Error{Rank: s.rank, Op: "gpucsp.Sample", Hop: hop, Msg: fmt.Sprintf(format, args...), Err: kind}
}

func (s *Sampler) wrapErr(hop int, what string, err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	return &Error{Rank: s.rank, Op: "gpucsp.Sample", Hop: hop, Msg: what, Err: err}
}

// Sample draws the mini-batch of seeds (distinct global IDs; DSP passes
// nodes this rank owns, but any node works) with key. It is a
// collective: every rank calls it the same number of times, in the same
// order (seed counts may differ, including 0). The batch lives on this
// rank's device and equals gpusample.Sampler.SampleDevice's over the
// whole graph with the same seeds and key.
func (s *Sampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*gpusample.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.errf(-1, ErrInput, "sampler is closed")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	L := len(s.cfg.Fanouts)
	if s.direct {
		b, err := s.gs.SampleDevice(seeds, key)
		if err != nil {
			if errors.Is(err, sample.ErrNode) || errors.Is(err, sample.ErrDuplicate) {
				err = fmt.Errorf("%w: %w", ErrInput, err)
			}
			return nil, s.wrapErr(0, "sampling on one device", err)
		}
		for h := range L {
			s.stats.Frontier[h] += int64(b.Blocks[L-1-h].NumDst)
		}
		s.stats.Batches++
		return b, nil
	}
	var status int64
	var carried error
	if err := checkSeeds(seeds, s.n); err != nil {
		status, carried = stInput, s.errf(0, ErrInput, "%v", err)
	}
	nF := int64(len(seeds))
	var F *cuda.Buffer
	if status == stOK {
		err := s.dev.Do(func(l *cuda.Locked) error {
			var err error
			if F, err = l.Alloc(backend.Int32, int(max(nF, 1))); err != nil {
				return err
			}
			return l.UploadFrom(F, seeds)
		})
		if err != nil {
			status, carried = stFailed, s.wrapErr(0, "uploading the seeds", err)
		}
	}
	seedBuf := F
	defer s.dev.Free(seedBuf)
	blocks := make([]gpusample.Block, L)
	fail := func(err error) (*gpusample.Batch, error) {
		gpusample.NewBatch(s.dev, nil, blocks).Free()
		return nil, err
	}
	for h := range L {
		if status != stOK {
			F, nF = nil, 0
		}
		blk, err := s.hop(ctx, h, F, nF, status, carried, key)
		if err != nil {
			var c *carry
			if !errors.As(err, &c) {
				return fail(err)
			}
			// The tail of this hop failed: tell the peers in the next
			// hop's header (after the last hop there is no next step).
			if h == L-1 {
				return fail(c.err)
			}
			status, carried = stFailed, c.err
			continue
		}
		blocks[L-1-h] = blk
		F, nF = blk.SrcNodes, int64(blk.NumSrc)
	}
	s.stats.Batches++
	return gpusample.NewBatch(s.dev, slices.Clone(seeds), blocks), nil
}

// carry marks a failure in a hop's tail (after its last exchange): the
// next hop's header reports it to the peers.
type carry struct{ err error }

func (c *carry) Error() string { return c.err.Error() }
func (c *carry) Unwrap() error { return c.err }

// alloc returns a buffer of max(n, 1) elements (exact views are taken
// for the exchanges), after checking n.
func (s *Sampler) alloc(l *cuda.Locked, tmp *[]*cuda.Buffer, dt backend.DType, n int64) (*cuda.Buffer, error) {
	if n < 0 || n > maxEntries {
		return nil, fmt.Errorf("%w: a buffer of %d entries", ErrTooLarge, n)
	}
	b, err := l.Alloc(dt, int(max(n, 1)))
	if err != nil {
		return nil, err
	}
	*tmp = append(*tmp, b)
	return b, nil
}

// count adds an exchange's bytes to the stats: send[p] elements of size
// es to rank p.
func (s *Sampler) count(send []int, es int) {
	if !s.remote {
		return
	}
	s.stats.Exchanges++
	for p, n := range send {
		if p == s.rank {
			s.stats.BytesLocal += int64(n * es)
		} else {
			s.stats.BytesSent[p] += int64(n * es)
		}
	}
}

func fill(P, v int) []int {
	out := make([]int, P)
	for i := range out {
		out[i] = v
	}
	return out
}

// hop runs hop h for the frontier F (nF nodes, frontier order) and
// returns its block. status != stOK takes part in the header exchange
// only, then returns carried.
func (s *Sampler) hop(ctx context.Context, h int, F *cuda.Buffer, nF int64, status int64, carried error, key sample.Key) (blk gpusample.Block, err error) {
	P, L := s.size, len(s.cfg.Fanouts)
	k := s.cfg.Fanouts[h]
	fn := s.fns
	var tmp []*cuda.Buffer // freed when the hop ends (the stream orders reuse)
	defer func() {
		for _, b := range tmp {
			s.dev.Free(b)
		}
	}()
	s.stats.Frontier[h] += nF

	// 1. Shuffle: owners, stable grouping, header.
	hdr := makeHeader(P, status, gpusample.HopKey(key, h), h, k, L)
	var hdrB, rhdrB, bptr, order, sendIDs *cuda.Buffer
	stageA := func(withFrontier bool) error {
		return s.dev.Do(func(l *cuda.Locked) error {
			var err error
			if hdrB, err = s.alloc(l, &tmp, backend.Int64, int64(P*hWords)); err != nil {
				return err
			}
			if rhdrB, err = s.alloc(l, &tmp, backend.Int64, int64(P*hWords)); err != nil {
				return err
			}
			if err := l.UploadFrom(hdrB, hdr); err != nil {
				return err
			}
			if sendIDs, err = s.alloc(l, &tmp, backend.Int32, nF); err != nil {
				return err
			}
			if !withFrontier || nF == 0 {
				return nil
			}
			owner, err := s.alloc(l, &tmp, backend.Int32, nF)
			if err != nil {
				return err
			}
			if err := l.Launch1D(fn["csp_owner"], nF, uint64(owner.Ptr()), uint64(F.Ptr()), cu.I64(nF), uint64(s.offB.Ptr()), cu.I32(int32(P))); err != nil {
				return err
			}
			if bptr, order, err = l.Bucket(owner, P, 0); err != nil {
				return err
			}
			tmp = append(tmp, bptr, order)
			if err := l.Launch1D(fn["csp_gather"], nF, uint64(sendIDs.Ptr()), uint64(F.Ptr()), uint64(order.Ptr()), cu.I64(nF)); err != nil {
				return err
			}
			return l.Launch1D(fn["csp_counts"], int64(P), uint64(hdrB.Ptr()), cu.I32(hWords), uint64(bptr.Ptr()), cu.I32(int32(P)))
		})
	}
	if err := stageA(status == stOK); err != nil {
		if status != stOK {
			return blk, s.wrapErr(h, "preparing the header", err)
		}
		// Report the failure in the header instead.
		status, carried, nF = stFailed, s.wrapErr(h, "routing the frontier", err), 0
		hdr = makeHeader(P, status, gpusample.HopKey(key, h), h, k, L)
		if err := stageA(false); err != nil {
			return blk, carried
		}
	}
	if err := s.x.AllToAll(ctx, rhdrB.View(0, P*hWords), hdrB.View(0, P*hWords)); err != nil {
		return blk, s.wrapErr(h, "header exchange", err)
	}
	s.count(fill(P, hWords), 8)
	var recv, sent []int64
	err = s.dev.Do(func(l *cuda.Locked) error {
		w := uint64(8 * P * hWords)
		if err := l.CopyToHost(s.pin, 0, rhdrB, w); err != nil {
			return err
		}
		if err := l.CopyToHost(s.pin, w, hdrB, w); err != nil {
			return err
		}
		if err := l.Sync(); err != nil {
			return err
		}
		all := s.pin.Int64s()
		recv, sent = slices.Clone(all[:P*hWords]), slices.Clone(all[P*hWords:2*P*hWords])
		return nil
	})
	if err != nil {
		return blk, s.wrapErr(h, "reading the header", err)
	}
	if status != stOK {
		return blk, carried
	}
	pl := &plan{P: P, rank: s.rank}
	if kind, msg := pl.readHeader(recv, sent, h, k, L, nF, s.rows); kind != nil {
		return blk, s.errf(h, kind, "%s", msg)
	}
	recvIDs, err := s.allocDo(&tmp, backend.Int32, pl.R)
	if err != nil {
		return blk, s.wrapErr(h, "allocating the received frontier", err)
	}
	sendN, recvN := ints(pl.sendN), ints(pl.recvN)
	if err := s.x.AllToAllV(ctx, recvIDs.View(0, int(pl.R)), recvN, sendIDs.View(0, int(nF)), sendN); err != nil {
		return blk, s.wrapErr(h, "node exchange", err)
	}
	s.count(sendN, 4)

	// 2. Sample: count the received nodes, agree on the totals, draw.
	var qptr, roffB, eid, src, packed *cuda.Buffer
	var tot []int64
	var E int64
	err = s.dev.Do(func(l *cuda.Locked) error {
		var err error
		if qptr, err = s.st.CountHop(l, h, recvIDs, pl.R); err != nil {
			return err
		}
		tmp = append(tmp, qptr)
		if roffB, err = s.alloc(l, &tmp, backend.Int64, int64(P+1)); err != nil {
			return err
		}
		if err := l.UploadFrom(roffB, pl.roff); err != nil {
			return err
		}
		totB, err := s.alloc(l, &tmp, backend.Int64, int64(P+1))
		if err != nil {
			return err
		}
		if err := l.Launch1D(fn["csp_totals"], int64(P+1), uint64(totB.Ptr()), uint64(qptr.Ptr()), uint64(roffB.Ptr()), cu.I32(int32(P))); err != nil {
			return err
		}
		if err := l.CopyToHost(s.pin, 0, totB, uint64(8*(P+1))); err != nil {
			return err
		}
		if err := l.Sync(); err != nil {
			return err
		}
		all := s.pin.Int64s()
		tot, E = slices.Clone(all[:P]), all[P]
		return nil
	})
	var st3 int64
	var err3 error
	if err != nil {
		st3, err3 = stFailed, s.wrapErr(h, "counting the received nodes", err)
	} else if st, msg := pl.ownerTotals(tot, E, k); st != stOK {
		kind := ErrTooLarge
		if st != stTooLarge {
			kind = ErrProtocol
		}
		st3, err3 = st, s.errf(h, kind, "%s", msg)
	}
	var t3B, r3B *cuda.Buffer
	err = s.dev.Do(func(l *cuda.Locked) error {
		var err error
		if t3B, err = s.alloc(l, &tmp, backend.Int64, int64(P*tWords)); err != nil {
			return err
		}
		if r3B, err = s.alloc(l, &tmp, backend.Int64, int64(P*tWords)); err != nil {
			return err
		}
		if st3 == stOK {
			// The owner's answer buffers, before the status goes out.
			if eid, err = s.alloc(l, &tmp, backend.Int64, pl.E); err != nil {
				st3, err3 = stFailed, s.wrapErr(h, "allocating the drawn edges", err)
			} else if src, err = s.alloc(l, &tmp, backend.Int32, pl.E); err != nil {
				st3, err3 = stFailed, s.wrapErr(h, "allocating the drawn edges", err)
			} else if packed, err = s.alloc(l, &tmp, backend.Int32, pl.R+pl.E); err != nil {
				st3, err3 = stFailed, s.wrapErr(h, "allocating the answers", err)
			}
		}
		return l.UploadFrom(t3B, pl.totalsSend(st3))
	})
	if err != nil {
		if err3 != nil {
			return blk, err3
		}
		return blk, s.wrapErr(h, "preparing the totals", err)
	}
	if err := s.x.AllToAll(ctx, r3B.View(0, P*tWords), t3B.View(0, P*tWords)); err != nil {
		return blk, s.wrapErr(h, "totals exchange", err)
	}
	s.count(fill(P, tWords), 8)
	var rt []int64
	err = s.dev.Do(func(l *cuda.Locked) error {
		if err := l.CopyToHost(s.pin, 0, r3B, uint64(8*P*tWords)); err != nil {
			return err
		}
		if err := l.Sync(); err != nil {
			return err
		}
		rt = slices.Clone(s.pin.Int64s()[:P*tWords])
		return nil
	})
	if err3 != nil {
		return blk, err3
	}
	if err != nil {
		return blk, s.wrapErr(h, "reading the totals", err)
	}
	if kind, msg := pl.readTotals(rt, k); kind != nil {
		return blk, s.errf(h, kind, "%s", msg)
	}
	ansSend, ansRecv := pl.answerCounts()
	var rpacked, recvE *cuda.Buffer
	err = s.dev.Do(func(l *cuda.Locked) error {
		var err error
		if err := s.st.DrawHop(l, h, recvIDs, qptr, pl.R, pl.roff, pl.keys, eid, src, pl.E); err != nil {
			return err
		}
		if err := l.Launch1D(fn["csp_pack"], pl.R, uint64(packed.Ptr()), uint64(qptr.Ptr()), uint64(src.Ptr()), uint64(roffB.Ptr()), cu.I32(int32(P)), cu.I64(pl.R)); err != nil {
			return err
		}
		if s.cfg.EdgeIDs {
			if err := l.Launch1D(fn["csp_add_i64"], pl.E, uint64(eid.Ptr()), cu.I64(pl.E), cu.I64(s.edgeBase)); err != nil {
				return err
			}
			if recvE, err = s.alloc(l, &tmp, backend.Int64, pl.Erecv); err != nil {
				return err
			}
		}
		rpacked, err = s.alloc(l, &tmp, backend.Int32, nF+pl.Erecv)
		return err
	})
	if err != nil {
		return blk, s.wrapErr(h, "drawing", err)
	}

	// 3. Reshuffle: counts and neighbors (and edge IDs) back.
	if err := s.x.AllToAllV(ctx, rpacked.View(0, int(nF+pl.Erecv)), ansRecv, packed.View(0, int(pl.R+pl.E)), ansSend); err != nil {
		return blk, s.wrapErr(h, "answer exchange", err)
	}
	s.count(ansSend, 4)
	if s.cfg.EdgeIDs {
		eSend, eRecv := ints(pl.tot), ints(pl.rtot)
		if err := s.x.AllToAllV(ctx, recvE.View(0, int(pl.Erecv)), eRecv, eid.View(0, int(pl.E)), eSend); err != nil {
			return blk, s.wrapErr(h, "edge ID exchange", err)
		}
		s.count(eSend, 8)
	}
	blk, err = s.assemble(h, pl, F, nF, bptr, order, rpacked, recvE, &tmp)
	if err != nil {
		return blk, &carry{s.wrapErr(h, "assembling the block", err)}
	}
	return blk, nil
}

// allocDo allocates a buffer outside Do.
func (s *Sampler) allocDo(tmp *[]*cuda.Buffer, dt backend.DType, n int64) (*cuda.Buffer, error) {
	var b *cuda.Buffer
	err := s.dev.Do(func(l *cuda.Locked) error {
		var err error
		b, err = s.alloc(l, tmp, dt, n)
		return err
	})
	return b, err
}

// assemble scatters the answers into frontier order and relabels them
// into the hop's block.
func (s *Sampler) assemble(h int, pl *plan, F *cuda.Buffer, nF int64, bptr, order, rpacked, recvE *cuda.Buffer, tmp *[]*cuda.Buffer) (gpusample.Block, error) {
	P, fn, E := s.size, s.fns, pl.Erecv
	var ptr, eidOut, srcNodes, local *cuda.Buffer
	var kept []*cuda.Buffer
	var sizes []int64
	err := s.dev.Do(func(l *cuda.Locked) error {
		var err error
		cnt, err := s.alloc(l, tmp, backend.Int64, nF+1)
		if err != nil {
			return err
		}
		cntS, err := s.alloc(l, tmp, backend.Int64, nF+1)
		if err != nil {
			return err
		}
		sptr, err := s.alloc(l, tmp, backend.Int64, nF+1)
		if err != nil {
			return err
		}
		SB, err := s.alloc(l, tmp, backend.Int64, int64(P))
		if err != nil {
			return err
		}
		if err := l.UploadFrom(SB, pl.S); err != nil {
			return err
		}
		if ptr, err = l.Alloc(backend.Int64, int(nF+1)); err != nil {
			return err
		}
		kept = append(kept, ptr)
		if eidOut, err = l.Alloc(backend.Int64, int(max(E, 1))); err != nil {
			return err
		}
		kept = append(kept, eidOut)
		if err := l.Launch1D(fn["csp_unpack_counts"], nF+1, uint64(cnt.Ptr()), uint64(cntS.Ptr()), uint64(rpacked.Ptr()),
			uint64(bptr.Ptr()), uint64(SB.Ptr()), uint64(order.Ptr()), cu.I32(int32(P)), cu.I64(nF)); err != nil {
			return err
		}
		if err := l.ScanI64(ptr, cnt, int(nF+1)); err != nil {
			return err
		}
		if err := l.ScanI64(sptr, cntS, int(nF+1)); err != nil {
			return err
		}
		src, err := s.alloc(l, tmp, backend.Int32, E)
		if err != nil {
			return err
		}
		var eidP, recvEP uint64
		if s.cfg.EdgeIDs {
			eidP, recvEP = uint64(eidOut.Ptr()), uint64(recvE.Ptr())
		} else if err := l.Memset(eidOut, 0xff); err != nil { // -1: not asked for
			return err
		}
		if err := l.Launch1D(fn["csp_unpack_src"], nF, uint64(src.Ptr()), eidP, uint64(rpacked.Ptr()), recvEP, uint64(ptr.Ptr()),
			uint64(sptr.Ptr()), uint64(bptr.Ptr()), uint64(order.Ptr()), cu.I32(int32(P)), cu.I64(nF)); err != nil {
			return err
		}
		var sz *cuda.Buffer
		if srcNodes, local, sz, err = s.st.Relabel(l, F, nF, src, ptr, E); err != nil {
			return err
		}
		kept = append(kept, srcNodes, local)
		*tmp = append(*tmp, sz)
		if err := l.CopyToHost(s.pin, 0, sz, 24); err != nil {
			return err
		}
		if err := l.Sync(); err != nil {
			return err
		}
		sizes = slices.Clone(s.pin.Int64s()[:3])
		return nil
	})
	freeKept := func() {
		for _, b := range kept {
			s.dev.Free(b)
		}
	}
	if err != nil {
		freeKept()
		return gpusample.Block{}, err
	}
	nd, e, ns := sizes[0], sizes[1], sizes[2]
	if nd != nF || e != E || ns < nd || ns > nd+e {
		freeKept()
		return gpusample.Block{}, s.errf(h, ErrProtocol, "device sizes nd=%d E=%d src=%d, want nd=%d E=%d", nd, e, ns, nF, E)
	}
	for _, t := range []struct {
		b *cuda.Buffer
		n int64
	}{{srcNodes, ns}, {local, e}, {eidOut, e}} {
		if err := t.b.Truncate(int(t.n)); err != nil {
			freeKept()
			return gpusample.Block{}, err
		}
	}
	A, err := s.dev.NewSparseFromDevice(int(nF), int(ns), ptr, local)
	if err != nil {
		freeKept()
		return gpusample.Block{}, err
	}
	return gpusample.Block{NumDst: int(nF), NumSrc: int(ns), NumEdges: int(e), A: A, SrcNodes: srcNodes, EdgeIDs: eidOut}, nil
}
