package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/serve/shmring"
)

// Relay makes a Server the local end of server-client mode (`strata
// relay`): strata_pyg starts it next to the trainer, it receives the
// epoch's batches from remote servers over gRPC (Go's receive: no GIL,
// several streams at once) and writes them into the same shared-memory
// ring as worker mode (SampleShm), so that the trainer maps them
// zero-copy. It holds no dataset: Info is the first upstream's, Sample
// and Features are refused.
//
// A SampleShm request to a relay is split over Upstreams as strata_pyg
// splits it over its own streams in gRPC mode: round-robin (stream k
// asks for part k of len(Upstreams), so batch i comes from stream i mod
// len) or, with ByPartition, each stream asks for the seeds its server
// owns (SampleRequest.owned) and the batches go a stream at a time in
// turn, skipping streams that have ended. Either way the ring's batch
// sequence is the order in which the loader's gRPC path would yield
// them, and each batch is the same.
type Relay struct {
	// Upstreams are the streams to open per request, in order; a server
	// asked for several streams is listed that many times (one Client
	// each: a connection and HTTP/2 window of its own).
	Upstreams   []*Client
	ByPartition bool
}

// relayAhead is how many received batches each upstream stream keeps
// beyond the one being written: the relay's own buffering (the upstream
// server's prefetch and the ring's slots bound the rest).
const relayAhead = 1

var errRelayOnly = status.Error(codes.Unimplemented, "serve: this is a relay (strata relay): it serves SampleShm and Info only; ask the upstream servers directly")

func (r *Relay) check(opt Options) error {
	if len(r.Upstreams) == 0 {
		return errors.New("serve: a relay without upstream servers")
	}
	for k, c := range r.Upstreams {
		if c == nil {
			return fmt.Errorf("serve: relay upstream %d is nil", k)
		}
	}
	if opt.RingDir == "" {
		return errors.New("serve: a relay needs a ring directory (RingDir): it serves SampleShm only")
	}
	return nil
}

// relayInfo is the first upstream's Info, offering the relay's ring.
func (s *Server) relayInfo(ctx context.Context) (*servepb.InfoReply, error) {
	r, err := s.opt.Relay.Upstreams[0].Info(ctx)
	if err != nil {
		// Not UNAVAILABLE: that would say the relay itself is not up yet
		// (strata_pyg waits for its child while Info answers so).
		err = upstreamError(err)
		code := status.Code(err)
		if code == codes.Unavailable || code == codes.DeadlineExceeded {
			err = status.Error(codes.FailedPrecondition, status.Convert(err).Message())
		}
		s.metrics.failed("Info", status.Code(err))
		return nil, err
	}
	r.Shm = true
	r.Capabilities = append(r.Capabilities, CapRelay)
	return r, nil
}

// CapRelay is listed in a relay's Info capabilities.
const CapRelay = "relay"

// upstreamError keeps the upstream's status code; its message names the
// upstream server (Client errors do).
func upstreamError(err error) error {
	if st, ok := status.FromError(err); ok {
		return status.Error(st.Code(), err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

type relayed struct {
	m   *servepb.Batch
	in  *relayIn // m's tensor data, in gRPC's buffers
	err error
}

func (s *Server) relayShm(ss servepb.Sampler_SampleShmServer, first *servepb.ShmControl) error {
	req := first.Request
	if req.InputType != "" {
		return reqErr(ErrInvalid, "input_type", -1, "typed batches are served over Sample, not SampleShm (a ring slot holds at most %d tensors): ask the servers directly (strata_pyg transport='grpc')", shmring.MaxTensors)
	}
	if req.NumParts > 1 || req.Part != 0 {
		return reqErr(ErrInvalid, "num_parts", -1, "%d: a relay splits the epoch over its upstream servers itself (ask for part 0 of 1)", req.NumParts)
	}
	rl := s.opt.Relay
	if req.Owned && !rl.ByPartition {
		return reqErr(ErrInvalid, "owned", -1, "this relay routes round-robin (strata relay --routing partition routes by part)")
	}
	prefetch := int(req.Prefetch)
	if prefetch == 0 {
		prefetch = s.opt.Prefetch
	}
	// The ring holds what the upstream streams keep ready together (the
	// loader split its prefetch depth over them).
	sh, err := s.newShmStream(prefetch*len(s.opt.Relay.Upstreams), first.Ring)
	if err != nil {
		return err
	}
	sh.recv = ss.Recv
	defer sh.close()
	// Counted among the active streams: Stats and the blocked-streams
	// gauge see the relay wait for its client's releases.
	st := &stream{shm: sh}
	s.active.Store(st, struct{}{})
	defer s.active.Delete(st)
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	sh.start(ctx, cancel)

	U := len(rl.Upstreams)
	chs := make([]chan relayed, U)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // runs before wg.Wait: the receivers see ctx end
	for k, c := range rl.Upstreams {
		r := proto.Clone(req).(*servepb.SampleRequest)
		if rl.ByPartition {
			r.Owned = true
		} else {
			r.Part, r.NumParts = uint32(k), uint32(U)
		}
		codec := newRelayCodec()
		bs, err := c.Sample(ctx, r, grpc.ForceCodecV2(codec))
		if err != nil {
			return upstreamError(err)
		}
		ch := make(chan relayed, relayAhead)
		chs[k] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer bs.Close()
			for {
				m, err := bs.Recv()
				in := codec.take(m)
				select {
				case ch <- relayed{m, in, err}:
				case <-ctx.Done():
					in.free()
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	live := make([]int, U)
	for k := range live {
		live[k] = k
	}
	j := 0
	for len(live) > 0 {
		next := live[:0]
		for _, k := range live {
			var g relayed
			select {
			case g = <-chs[k]:
			case <-ctx.Done():
				return streamEnd(ctx)
			}
			if g.err == io.EOF {
				continue
			}
			if g.err != nil {
				return upstreamError(g.err)
			}
			err := sh.relayBatch(ctx, ss, j, g.m, g.in, rl.Upstreams[k].Addr)
			g.in.free()
			if err != nil {
				return err
			}
			s.stats.sent.Add(1)
			s.metrics.batches.Inc()
			j++
			next = append(next, k)
		}
		live = next
	}
	return sh.finish(ctx, j)
}

// relayBatch puts an upstream batch into ring slot j mod S (once batch
// j-S is released) and sends its reference; a batch over the slots (or
// with no ring) goes on inline, as it came.
func (sh *shmStream) relayBatch(ctx context.Context, ss servepb.Sampler_SampleShmServer, j int, m *servepb.Batch, in *relayIn, from string) error {
	if m.Shm != nil || len(m.Nodes) > 0 || len(m.Edges) > 0 {
		return status.Errorf(codes.Internal, "serve: server %s: batch %d is a ring or typed batch, not a node batch", from, m.Index)
	}
	fields := []struct {
		name string
		num  protowire.Number
		t    *servepb.Tensor
	}{{"n_id", 3, m.NId}, {"edge_index", 4, m.EdgeIndex}, {"input_id", 8, m.InputId}, {"x", 9, m.X}, {"y", 10, m.Y}, {"edge_label_index", 13, m.EdgeLabelIndex}}
	if in == nil { // not through the relay's codec: the data is in the message
		in = &relayIn{data: map[protowire.Number][][]byte{}}
		for _, f := range fields {
			if f.t != nil {
				in.data[f.num] = [][]byte{f.t.Data}
			}
		}
	}
	var specs []shmring.Tensor
	var nums []protowire.Number
	for _, f := range fields {
		if f.t == nil {
			continue
		}
		specs = append(specs, shmring.Tensor{Name: f.name, DType: uint32(f.t.Dtype), Shape: f.t.Shape})
		nums = append(nums, f.num)
	}
	used, err := shmring.Place(specs)
	if err != nil {
		return status.Errorf(codes.Internal, "serve: server %s: batch %d: %v", from, m.Index, err)
	}
	for i, t := range specs {
		if n := in.size(nums[i]); n != t.Bytes {
			return status.Errorf(codes.Internal, "serve: server %s: batch %d: tensor %s holds %d bytes, shape %v needs %d", from, m.Index, t.Name, n, t.Shape, t.Bytes)
		}
	}
	if j == 0 {
		sh.makeRing(used)
	}
	r := sh.ring
	if r == nil || used > r.Header.SlotBytes {
		note := sh.note
		if r != nil {
			note = fmt.Sprintf("batch %d takes %d bytes, over the ring's slots of %d: sent inline", m.Index, used, r.Header.SlotBytes)
		}
		if sh.noted.CompareAndSwap(false, true) {
			m.Note = note
		}
		for _, f := range fields {
			if f.t != nil {
				f.t.Data = in.bytes(f.num)
			}
		}
		sh.s.metrics.ringInline.Inc()
		sh.sent.Add(1)    // before Send: the client may release it at once
		return ss.Send(m) // encoded before it returns: in may be freed then
	}
	k, waited, err := sh.waitSlot(ctx, j, r.Header.Slots)
	if err != nil {
		return err
	}
	t1 := time.Now()
	err = writeSlot(r.Slot(k), uint64(j), used, specs, func(w tensorDst) {
		for i, t := range specs {
			copyPieces(w.tensor(0, t.Name, t.DType, t.Shape...), in.data[nums[i]])
		}
	})
	if err != nil {
		return fmt.Errorf("serve: batch %d: ring slot %d: %w", m.Index, k, err)
	}
	tm := m.Timing
	if tm == nil {
		tm = &servepb.BatchTiming{}
	}
	// The relay's copy counts as encoding, its wait for a slot as the
	// server's slot wait (the upstream's own waits stay in).
	tm.EncodeNs += uint64(time.Since(t1))
	tm.SlotWaitNs += uint64(waited)
	out := &servepb.Batch{Index: m.Index, NumBatches: m.NumBatches, NumSampledNodes: m.NumSampledNodes,
		NumSampledEdges: m.NumSampledEdges, BatchSize: m.BatchSize, Timing: tm,
		Shm: &servepb.ShmSlot{Path: r.Path, Nonce: r.Header.Nonce, NumSlots: uint32(r.Header.Slots),
			SlotBytes: uint64(r.Header.SlotBytes), Slot: uint32(k), Sequence: uint64(j)}}
	sh.s.metrics.ringBytes.Add(float64(used))
	// Counted before Send: the client may release the batch as soon
	// as it has it.
	sh.sent.Add(1)
	return ss.Send(out)
}

// copyPieces copies the concatenation of src into dst, runs of pieces
// of at least 4 MiB on goroutines of their own when large (a batch's
// features are tens of MiB in 16 KiB pieces).
func copyPieces(dst []byte, src [][]byte) {
	const chunk = 4 << 20
	if len(dst) <= 2*chunk {
		for _, p := range src {
			dst = dst[copy(dst, p):]
		}
		return
	}
	var wg sync.WaitGroup
	for len(src) > 0 {
		n, k := 0, 0
		for k < len(src) && n < chunk {
			n += len(src[k])
			k++
		}
		run, out := src[:k], dst[:n]
		src, dst = src[k:], dst[n:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range run {
				out = out[copy(out, p):]
			}
		}()
	}
	wg.Wait()
}
