package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/serve/shmring"
)

// SampleShm is Sample for a client on the same host: the batches'
// tensors go through a shared-memory ring (package shmring) and the
// stream carries only which slot holds which batch, and the client's
// releases (see ShmControl in the proto file).
func (s *Server) SampleShm(ss servepb.Sampler_SampleShmServer) error {
	err := s.sampleShm(ss)
	if err != nil {
		err = grpcError(err)
		s.metrics.failed("SampleShm", status.Code(err))
	}
	return err
}

// Limits of a SampleShm request.
const (
	// firstMessageTimeout bounds the wait for the request that opens a
	// SampleShm stream.
	firstMessageTimeout = 30 * time.Second
	maxReleaseTimeout   = 24 * time.Hour
)

func (s *Server) sampleShm(ss servepb.Sampler_SampleShmServer) error {
	done, err := s.openStream()
	if err != nil {
		return err
	}
	defer done()
	// The request is read before any refusal: a handler that returns
	// while the client's first message is still in flight can end the
	// stream with a bare EOF on the client instead of the refusal.
	first, err := recvFirst(ss)
	if err != nil {
		return err
	}
	if s.opt.RingDir == "" {
		return reqErr(ErrUnavailable, "ring", -1, "this server has no shared-memory ring directory (strata serve --ring-dir): use Sample")
	}
	if first.Request == nil || first.Ring == nil || first.Released != 0 {
		return reqErr(ErrInvalid, "request", -1, "the first message of SampleShm must hold request and ring, and nothing else")
	}
	if s.opt.Relay != nil {
		return s.relayShm(ss, first)
	}
	st, err := s.prepare(first.Request)
	if err != nil {
		return err
	}
	if st.typed >= 0 {
		return reqErr(ErrInvalid, "input_type", -1, "typed batches are served over Sample, not SampleShm (a ring slot holds at most %d tensors)", shmring.MaxTensors)
	}
	sh, err := s.newShmStream(st.prefetch, first.Ring)
	if err != nil {
		return err
	}
	st.shm = sh
	sh.recv = ss.Recv
	defer sh.close()
	return st.run(ss.Context(), ss.SendMsg)
}

// recvFirst waits (at most firstMessageTimeout) for a stream's request.
func recvFirst(ss servepb.Sampler_SampleShmServer) (*servepb.ShmControl, error) {
	type got struct {
		m   *servepb.ShmControl
		err error
	}
	ch := make(chan got, 1)
	go func() {
		m, err := ss.Recv()
		ch <- got{m, err}
	}()
	t := time.NewTimer(firstMessageTimeout)
	defer t.Stop()
	select {
	case g := <-ch:
		if g.err == io.EOF {
			return nil, reqErr(ErrInvalid, "request", -1, "the stream closed before its request")
		}
		return g.m, g.err
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "serve: no SampleShm request within %v of opening the stream", firstMessageTimeout)
	case <-ss.Context().Done():
		return nil, status.FromContextError(ss.Context().Err()).Err()
	}
}

// shmStream is the ring side of a SampleShm stream.
type shmStream struct {
	s       *Server
	want    int   // slots asked for
	budget  int64 // the ring's bytes at most
	timeout time.Duration
	narrow  bool // int32 IDs in the slots (ShmRequest.narrow_ids)
	recv    func() (*servepb.ShmControl, error)

	ready chan struct{} // closed once the first batch has made (or failed to make) the ring
	ring  *shmring.Ring // nil: no ring, batches go inline (note says why)
	slot0 shmring.RingHeader
	note  string
	noted atomic.Bool // a note went out already

	acks    acks
	sent    atomic.Uint64 // batches handed to gRPC
	waiting atomic.Int32  // workers waiting for a release
}

func (s *Server) newShmStream(prefetch int, r *servepb.ShmRequest) (*shmStream, error) {
	want := int(r.Slots)
	if want == 0 {
		want = prefetch + 3
	}
	if want > shmring.MaxSlots {
		return nil, reqErr(ErrInvalid, "ring.slots", -1, "%d: at most %d", r.Slots, shmring.MaxSlots)
	}
	budget := s.opt.RingBytes
	if r.RingBytes > 0 && int64(min(r.RingBytes, 1<<62)) < budget {
		budget = int64(r.RingBytes)
	}
	timeout := s.opt.ReleaseTimeout
	if r.ReleaseTimeoutMs > 0 {
		timeout = time.Duration(r.ReleaseTimeoutMs) * time.Millisecond
	}
	if timeout > maxReleaseTimeout {
		return nil, reqErr(ErrInvalid, "ring.release_timeout_ms", -1, "%d: at most %v", r.ReleaseTimeoutMs, maxReleaseTimeout)
	}
	sh := &shmStream{s: s, want: want, budget: budget, timeout: timeout, narrow: r.NarrowIds, ready: make(chan struct{})}
	sh.acks.changed = make(chan struct{})
	return sh, nil
}

// start reads the client's releases until the stream ends; a protocol
// error cancels the stream with its cause.
func (sh *shmStream) start(ctx context.Context, cancel context.CancelCauseFunc) {
	go func() {
		for {
			m, err := sh.recv()
			if err != nil {
				if err == io.EOF {
					err = errClientClosed
				}
				sh.acks.fail(err)
				return
			}
			if err := sh.acks.apply(m, sh.sent.Load()); err != nil {
				// The cause first: a worker that the failure wakes
				// then ends the stream with it, not with "no release
				// can come".
				cancel(grpcError(err))
				sh.acks.fail(err)
				return
			}
		}
	}()
}

var errClientClosed = errors.New("the client closed its side of the stream")

// acks is the client's release count: batches [0, n) are released.
type acks struct {
	mu      sync.Mutex
	n       uint64
	err     error         // no more releases will come: why
	changed chan struct{} // closed (and replaced) on every change
}

// apply takes one control message: only released may be set, never
// below the count so far nor above the batches sent.
func (a *acks) apply(m *servepb.ShmControl, sent uint64) error {
	if m.Request != nil || m.Ring != nil {
		return reqErr(ErrInvalid, "request", -1, "only the first SampleShm message may hold a request or ring")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m.Released < a.n {
		return reqErr(ErrInvalid, "released", -1, "%d after %d: releases are cumulative and never go back", m.Released, a.n)
	}
	if m.Released > sent {
		return reqErr(ErrInvalid, "released", -1, "%d batches released, only %d sent", m.Released, sent)
	}
	if m.Released > a.n {
		a.n = m.Released
		close(a.changed)
		a.changed = make(chan struct{})
	}
	return nil
}

func (a *acks) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
		close(a.changed)
		a.changed = make(chan struct{})
	}
}

// wait returns once at least n batches are released, or fails after
// timeout, when no release can come, or when ctx ends.
func (a *acks) wait(ctx context.Context, n uint64, timeout time.Duration, what func() string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		a.mu.Lock()
		got, err, ch := a.n, a.err, a.changed
		a.mu.Unlock()
		if got >= n {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return streamEnd(ctx) // the stream was ended for a protocol error: that one
			}
			return status.Errorf(codes.Aborted, "serve: %s, but no release can come: %v", what(), err)
		}
		select {
		case <-ch:
		case <-t.C:
			return status.Errorf(codes.DeadlineExceeded, "serve: %s within %v (the release timeout): is the trainer stuck?", what(), timeout)
		case <-ctx.Done():
			return streamEnd(ctx)
		}
	}
}

// slotBytesFor sizes the slots from the first batch: 25% and 256 KiB of
// headroom (later batches differ a little; one that does not fit goes
// inline).
func slotBytesFor(used int64) int64 {
	b := used + max(used/4, 256<<10)
	return (b + shmring.SlotAlign - 1) / shmring.SlotAlign * shmring.SlotAlign
}

// makeRing creates the stream's ring for a first batch of used bytes:
// the slots asked for, fewer (at least min(3, asked)) if the budget or
// half the free memory of the ring directory does not hold them, and
// smaller slots if even that does not fit. On failure the stream goes on
// inline, and note says why.
func (sh *shmStream) makeRing(used int64) {
	defer close(sh.ready)
	slotBytes := slotBytesFor(used)
	budget := sh.budget
	if free, err := shmring.Free(sh.s.opt.RingDir); err == nil && free/2 < budget {
		budget = free / 2
	}
	slots := sh.want
	if int64(slots)*slotBytes > budget {
		slots = int(min(budget/slotBytes, int64(slots)))
		if least := min(3, sh.want); slots < least {
			slots = least
			slotBytes = budget / int64(slots) / shmring.SlotAlign * shmring.SlotAlign
		}
	}
	if slotBytes < shmring.MinSlotBytes {
		sh.note = fmt.Sprintf("no shared-memory ring: %d bytes (the ring budget, or half the free space of %s) cannot hold %d slots; batches come inline", budget, sh.s.opt.RingDir, slots)
		return
	}
	r, err := shmring.Create(sh.s.opt.RingDir, slots, slotBytes)
	if err != nil {
		sh.note = fmt.Sprintf("no shared-memory ring (%v); batches come inline", err)
		return
	}
	sh.ring = r
	sh.slot0 = r.Header
}

// produce puts batch j of the stream (sequence j) into its slot, j mod
// the slot count, once the client has released batch j - slots; batches
// that do not fit a slot, or all of them without a ring, go inline.
func (sh *shmStream) produce(ctx context.Context, st *stream, j int, b *PyGBatch, pos []int32, tm batchTiming) result {
	i := st.jobs[j]
	var sz slotWriter
	wide := !sh.narrow
	st.putTensors(&sz, b, pos, wide, false)
	used, err := shmring.Place(sz.specs)
	if err != nil {
		return result{err: fmt.Errorf("serve: batch %d: %w", i, err)}
	}
	if j == 0 {
		sh.makeRing(used)
	} else {
		select {
		case <-sh.ready:
		case <-ctx.Done():
			return result{err: streamEnd(ctx)}
		}
	}
	r := sh.ring
	if r == nil || used > r.Header.SlotBytes {
		note := sh.note
		if r != nil {
			note = fmt.Sprintf("batch %d takes %d bytes, over the ring's slots of %d: sent inline", i, used, r.Header.SlotBytes)
		}
		if !sh.noted.CompareAndSwap(false, true) {
			note = ""
		}
		msg, size, err := st.encodeWire(b, i, pos, nil, note, sh.s.opt.MaxSendBytes, tm)
		sh.s.metrics.ringInline.Inc()
		return result{msg: msg, size: size, err: err}
	}
	k, waited, err := sh.waitSlot(ctx, j, r.Header.Slots)
	if err != nil {
		return result{err: err, wait: waited}
	}
	tm.slotWait = waited
	t1 := time.Now()
	if err := writeSlot(r.Slot(k), uint64(j), used, sz.specs, func(w tensorDst) { st.putTensors(w, b, pos, wide, false) }); err != nil {
		return result{err: fmt.Errorf("serve: batch %d: ring slot %d: %w", i, k, err), wait: waited}
	}
	ref, err := proto.Marshal(&servepb.ShmSlot{Path: r.Path, Nonce: r.Header.Nonce, NumSlots: uint32(r.Header.Slots),
		SlotBytes: uint64(r.Header.SlotBytes), Slot: uint32(k), Sequence: uint64(j)})
	if err != nil {
		return result{err: err, wait: waited}
	}
	tm.encode = time.Since(t1)
	msg, size, err := st.encodeWire(b, i, pos, ref, "", sh.s.opt.MaxSendBytes, tm)
	sh.s.metrics.ringBytes.Add(float64(used))
	return result{msg: msg, size: size, err: err, wait: waited}
}

// writeSlot writes a batch's tensors (put, laid out as specs) and then
// the header into slot. A fault on the mapping (the file shrunk under
// it) is an error, not a crash.
func writeSlot(slot []byte, seq uint64, used int64, specs []shmring.Tensor, put func(tensorDst)) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("memory fault at %#x writing the shared-memory ring: %v", f.Addr(), r)
				return
			}
			panic(r)
		}
	}()
	put(&slotWriter{specs: specs, slot: slot})
	return shmring.WriteSlotHeader(slot, seq, used, specs)
}

// waitSlot waits until batch j's ring slot (j mod S of S slots) is free:
// the client has released the batch that used it, S batches before.
// It returns the slot and how long it waited.
func (sh *shmStream) waitSlot(ctx context.Context, j, S int) (k int, waited time.Duration, err error) {
	k = j % S
	if j < S {
		return k, 0, nil
	}
	t0 := time.Now()
	sh.waiting.Add(1)
	err = sh.acks.wait(ctx, uint64(j-S+1), sh.timeout, func() string {
		return fmt.Sprintf("the client did not release ring slot %d (its batch %d) for batch %d", k, j-S, j)
	})
	sh.waiting.Add(-1)
	return k, time.Since(t0), err
}

// finish keeps the stream (and so its ring) open until the client has
// released its n batches or closed its side: the last messages may still
// be on their way to a client that has not mapped the ring yet.
func (sh *shmStream) finish(ctx context.Context, n int) error {
	if sh.ring == nil {
		return nil
	}
	sh.waiting.Add(1)
	defer sh.waiting.Add(-1)
	err := sh.acks.wait(ctx, uint64(n), sh.timeout, func() string {
		return fmt.Sprintf("the client did not release the last of its %d batches", n)
	})
	if status.Code(err) == codes.Aborted && errors.Is(sh.acks.cause(), errClientClosed) {
		return nil // the client is done with the ring
	}
	return err
}

func (a *acks) cause() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// close removes the ring once the stream's workers are done.
func (sh *shmStream) close() {
	if sh.ring != nil {
		sh.ring.Close()
	}
}

// slotWriter lays a batch's tensors out in a ring slot: a sizing pass
// (slot nil) records them, Place sets their offsets, and the writing
// pass returns their bytes in the slot.
type slotWriter struct {
	specs []shmring.Tensor
	slot  []byte
	next  int
}

func (w *slotWriter) tensor(_ protowire.Number, name string, dtype uint32, shape ...int64) []byte {
	if w.slot == nil {
		w.specs = append(w.specs, shmring.Tensor{Name: name, DType: dtype, Shape: append([]int64(nil), shape...)})
		return nil
	}
	t := w.specs[w.next]
	w.next++
	return w.slot[t.Offset : t.Offset+t.Bytes]
}
