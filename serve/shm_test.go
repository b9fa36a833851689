package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/serve/shmring"
)

// shmClient reads a SampleShm stream as strata_pyg does: it maps the
// ring, checks each slot's header and releases batches.
type shmClient struct {
	t        *testing.T
	s        grpc.BidiStreamingClient[servepb.ShmControl, servepb.Batch]
	cancel   context.CancelFunc
	mem      []byte
	hdr      shmring.RingHeader
	path     string
	slotsHit map[uint32]int
	inline   int
	notes    []string
	narrow   bool // int32 IDs expected in the slots
}

func openShm(t *testing.T, c *Client, req *servepb.SampleRequest, ring *servepb.ShmRequest) *shmClient {
	t.Helper()
	ctx, cancel := context.WithCancel(c.ctx(context.Background()))
	s, err := c.c.SampleShm(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.ProtocolVersion = ProtocolVersion
	if err := s.Send(&servepb.ShmControl{Request: req, Ring: ring}); err != nil {
		cancel()
		t.Fatal(err)
	}
	sc := &shmClient{t: t, s: s, cancel: cancel, slotsHit: map[uint32]int{}}
	t.Cleanup(sc.close)
	return sc
}

func (sc *shmClient) close() {
	sc.cancel()
	if sc.mem != nil {
		unix.Munmap(sc.mem)
		sc.mem = nil
	}
}

// release says batches [0, n) are released. A stream the server has
// ended answers io.EOF (its status comes with the next Recv).
func (sc *shmClient) release(n uint64) error {
	if err := sc.s.Send(&servepb.ShmControl{Released: n}); err != io.EOF {
		return err
	}
	return nil
}

// next returns the next batch with its tensors decoded into the message
// (as the wire's dtypes, for checkBatch), io.EOF after the last.
func (sc *shmClient) next() (*servepb.Batch, error) {
	t := sc.t
	m, err := sc.s.Recv()
	if err != nil {
		return nil, err
	}
	if m.Note != "" {
		sc.notes = append(sc.notes, m.Note)
	}
	ref := m.Shm
	if ref == nil {
		sc.inline++
		return m, nil
	}
	if m.NId != nil || m.X != nil {
		t.Fatalf("batch %d has tensors and a slot", m.Index)
	}
	if sc.mem == nil {
		f, err := os.Open(ref.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		if sc.mem, err = unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED); err != nil {
			t.Fatal(err)
		}
		if sc.hdr, err = shmring.ParseRingHeader(sc.mem); err != nil {
			t.Fatal(err)
		}
		sc.path = ref.Path
		if sc.hdr.FileBytes() != fi.Size() || sc.hdr.Nonce != ref.Nonce || sc.hdr.Slots != int(ref.NumSlots) || sc.hdr.SlotBytes != int64(ref.SlotBytes) {
			t.Fatalf("ring %+v of %d bytes, message %+v", sc.hdr, fi.Size(), ref)
		}
	}
	if ref.Path != sc.path || int(ref.Slot) >= sc.hdr.Slots {
		t.Fatalf("slot reference %+v", ref)
	}
	sc.slotsHit[ref.Slot]++
	off := sc.hdr.SlotOffset(int(ref.Slot))
	slot := sc.mem[off : off+sc.hdr.SlotBytes]
	h, err := shmring.ParseSlotHeader(slot, sc.hdr.SlotBytes, ref.Sequence, "slot")
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range h.Tensors {
		b := slot[ts.Offset : ts.Offset+ts.Bytes]
		switch ts.Name {
		case "n_id", "edge_index", "y", "edge_label_index":
			want := uint32(shmring.DTypeInt64)
			if sc.narrow {
				want = shmring.DTypeInt32
			}
			if ts.DType != want {
				t.Fatalf("%s is dtype %d, want %d", ts.Name, ts.DType, want)
			}
			var v []int32
			if sc.narrow {
				v = make([]int32, len(b)/4)
				for i := range v {
					v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
				}
			} else {
				v = make([]int32, len(b)/8)
				for i := range v {
					v[i] = int32(binary.LittleEndian.Uint64(b[8*i:]))
				}
			}
			tt := Int32Tensor(v, ts.Shape...)
			switch ts.Name {
			case "n_id":
				m.NId = tt
			case "edge_index":
				m.EdgeIndex = tt
			case "edge_label_index":
				m.EdgeLabelIndex = tt
			default:
				m.Y = tt
			}
		case "input_id":
			m.InputId = &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT64, Shape: ts.Shape, Data: slices.Clone(b)}
		case "x":
			m.X = &servepb.Tensor{Dtype: servepb.DType_DTYPE_FLOAT32, Shape: ts.Shape, Data: slices.Clone(b)}
		default:
			t.Fatalf("unexpected tensor %s", ts.Name)
		}
	}
	return m, nil
}

func ringDir(t testing.TB) string {
	t.Helper()
	if !shmring.Supported {
		t.Skip("no shared-memory rings here")
	}
	return t.TempDir()
}

// SampleShm's batches are Sample's, slot after slot, several workers
// filling the slots in order; the ring is gone when the stream ends.
func TestSampleShmEqualsSample(t *testing.T) {
	ds := tiny(t)
	dir := ringDir(t)
	s, addr := start(t, Options{RingDir: dir})
	c := dial(t, addr, ClientOptions{})
	info, err := c.Info(context.Background())
	if err != nil || !info.Shm {
		t.Fatalf("info: %v, %v", info, err)
	}
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 40, Fanouts: []int32{5, 3},
		Shuffle: true, Seed: 4, Epoch: 1, WithFeatures: true, WithLabels: true, Workers: 3, Prefetch: 2}
	want := collect(t, c, proto.Clone(req).(*servepb.SampleRequest))
	for _, narrow := range []bool{false, true} {
		t.Run(fmt.Sprintf("narrow=%v", narrow), func(t *testing.T) { shmEqualsSample(t, s, ds, dir, c, req, want, narrow) })
	}
}

func shmEqualsSample(t *testing.T, s *Server, ds *dataset.Dataset, dir string, c *Client, req *servepb.SampleRequest, want []*servepb.Batch, narrow bool) {
	sc := openShm(t, c, proto.Clone(req).(*servepb.SampleRequest), &servepb.ShmRequest{Slots: 3, NarrowIds: narrow})
	sc.narrow = narrow
	var got []*servepb.Batch
	for {
		b, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
		if err := sc.release(uint64(len(got))); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != len(want) || len(got) < 10 {
		t.Fatalf("%d batches through the ring, %d through Sample", len(got), len(want))
	}
	for i := range got {
		w, in := expect(t, ds, req, ds.Train, i)
		checkBatch(t, ds, got[i], w, in)
		if !proto.Equal(got[i].X, want[i].X) || !proto.Equal(got[i].NId, want[i].NId) || !proto.Equal(got[i].EdgeIndex, want[i].EdgeIndex) {
			t.Fatalf("batch %d differs from Sample's", i)
		}
		if tm := got[i].Timing; tm == nil || tm.SampleNs == 0 || tm.EncodeNs == 0 {
			t.Fatalf("batch %d: timing %v, want sample and encode times", i, tm)
		}
	}
	// Three slots, each used in turn; nothing inline.
	if sc.inline != 0 || len(sc.slotsHit) != 3 || sc.slotsHit[0] != (len(got)+2)/3 {
		t.Fatalf("slots used %v, %d inline (notes %q)", sc.slotsHit, sc.inline, sc.notes)
	}
	waitFor(t, "the stream to end", func() bool { return s.Stats().Streams == 0 })
	if left, _ := filepath.Glob(filepath.Join(dir, "ring-*")); len(left) != 0 {
		t.Fatalf("rings left behind: %v", left)
	}
}

// The server writes a slot only after its previous batch is released:
// a client that holds its batches stops the sampling.
func TestSampleShmFlowControl(t *testing.T) {
	s, addr := start(t, Options{RingDir: ringDir(t)})
	c := dial(t, addr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}, Workers: 2, Prefetch: 1}
	sc := openShm(t, c, req, &servepb.ShmRequest{Slots: 4})
	for range 4 {
		if _, err := sc.next(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the stream to wait for a release", func() bool { return s.Stats().Blocked == 1 })
	// Workers 2 and prefetch 2 (max(prefetch, workers)): the two batches
	// after the four slots are sampled at most, none written.
	if st := s.Stats(); st.Sent != 4 || st.Produced > 4 {
		t.Fatalf("stats %+v: want 4 batches sent and produced while the client holds every slot", st)
	}
	// Releasing two lets two more through, in order.
	if err := sc.release(2); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 6; i++ {
		b, err := sc.next()
		if err != nil || int(b.Index) != i || sc.slotsHit[uint32(i%4)] != 2 {
			t.Fatalf("batch %d: %v, %v (slots %v)", i, b.GetIndex(), err, sc.slotsHit)
		}
	}
	waitFor(t, "the stream to wait again", func() bool { return s.Stats().Blocked == 1 && s.Stats().Sent == 6 })
}

func TestSampleShmReleaseTimeout(t *testing.T) {
	_, addr := start(t, Options{RingDir: ringDir(t)})
	c := dial(t, addr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}}
	sc := openShm(t, c, req, &servepb.ShmRequest{Slots: 2, ReleaseTimeoutMs: 200})
	t0 := time.Now()
	var err error
	for err == nil {
		_, err = sc.next()
	}
	if code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "did not release ring slot 0") || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("a client that never releases: %v", err)
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Fatalf("the release timeout of 200ms took %v", d)
	}
}

func TestSampleShmRefusals(t *testing.T) {
	dir := ringDir(t)
	_, addr := start(t, Options{RingDir: dir})
	c := dial(t, addr, ClientOptions{})
	good := func() *servepb.SampleRequest {
		return &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}}
	}
	first := func(m *servepb.ShmControl) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := c.c.SampleShm(ctx)
		if err != nil {
			return err
		}
		if m.Request != nil {
			m.Request.ProtocolVersion = ProtocolVersion
		}
		s.Send(m)
		_, err = s.Recv()
		return err
	}
	for _, tc := range []struct {
		name string
		m    *servepb.ShmControl
		code codes.Code
		want string
	}{
		{"no ring", &servepb.ShmControl{Request: good()}, codes.InvalidArgument, "must hold request and ring"},
		{"released first", &servepb.ShmControl{Request: good(), Ring: &servepb.ShmRequest{}, Released: 1}, codes.InvalidArgument, "nothing else"},
		{"slots", &servepb.ShmControl{Request: good(), Ring: &servepb.ShmRequest{Slots: 5000}}, codes.InvalidArgument, "ring.slots"},
		{"timeout", &servepb.ShmControl{Request: good(), Ring: &servepb.ShmRequest{ReleaseTimeoutMs: 1 << 31}}, codes.InvalidArgument, "release_timeout"},
		{"bad request", &servepb.ShmControl{Request: &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, Fanouts: []int32{3}}, Ring: &servepb.ShmRequest{}}, codes.InvalidArgument, "batch_size"},
	} {
		if err := first(tc.m); code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.code, tc.want)
		}
	}
	// Releases must be cumulative and cover only batches sent.
	for _, rel := range [][]uint64{{5}, {1, 0}} {
		sc := openShm(t, c, good(), &servepb.ShmRequest{Slots: 1})
		var err error
		for k, n := range rel {
			if _, err = sc.next(); err != nil {
				t.Fatalf("batch %d: %v", k, err)
			}
			sc.release(n)
		}
		for err == nil {
			_, err = sc.next()
		}
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "released") {
			t.Errorf("releases %v: %v", rel, err)
		}
	}
	// A server without a ring directory.
	_, plain := start(t, Options{})
	c2 := dial(t, plain, ClientOptions{})
	sc := openShm(t, c2, good(), &servepb.ShmRequest{})
	if _, err := sc.next(); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--ring-dir") {
		t.Fatalf("no ring directory: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "ring-*")); len(left) != 0 {
		t.Fatalf("rings left behind: %v", left)
	}
}

// Without room for a ring, or for a batch in a slot, batches come inline
// with a note (once).
func TestSampleShmInline(t *testing.T) {
	ds := tiny(t)
	_, addr := start(t, Options{RingDir: ringDir(t), RingBytes: 8 << 10})
	c := dial(t, addr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_VAL, BatchSize: 100, Fanouts: []int32{4}, WithFeatures: true}
	// 8 KiB hold no 3 slots of 4 KiB: no ring at all.
	sc := openShm(t, c, req, &servepb.ShmRequest{})
	n := 0
	for {
		b, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		w, in := expect(t, ds, req, ds.Val, n)
		checkBatch(t, ds, b, w, in)
		n++
		sc.release(uint64(n))
	}
	if sc.inline != n || len(sc.notes) != 1 || !strings.Contains(sc.notes[0], "no shared-memory ring") {
		t.Fatalf("%d of %d inline, notes %q", sc.inline, n, sc.notes)
	}
	// A budget of three 4 KiB slots: batches of ~100 nodes with features
	// (~9 KB) go inline, with a note; batches of ~10 nodes use the slots.
	_, addr2 := start(t, Options{RingDir: ringDir(t), RingBytes: 3 * 4096})
	c2 := dial(t, addr2, ClientOptions{})
	for _, tc := range []struct {
		bs, fanout int
		inline     bool
	}{{20, 4, true}, {5, 1, false}} {
		req = &servepb.SampleRequest{Split: servepb.Split_SPLIT_VAL, BatchSize: uint32(tc.bs), Fanouts: []int32{int32(tc.fanout)}, WithFeatures: true}
		sc = openShm(t, c2, req, &servepb.ShmRequest{Slots: 3})
		for n = 0; ; n++ {
			b, err := sc.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			w, in := expect(t, ds, req, ds.Val, n)
			checkBatch(t, ds, b, w, in)
			sc.release(uint64(n + 1))
		}
		// (The last batch of 20 has 2 seeds: it fits.)
		if tc.inline && (sc.inline != n-1 || len(sc.notes) != 1 || !strings.Contains(sc.notes[0], "over the ring's slots of 4096")) {
			t.Fatalf("batches of %d: %d of %d inline, notes %q", tc.bs, sc.inline, n, sc.notes)
		}
		if !tc.inline && (sc.inline != 0 || sc.hdr.Slots != 3 || sc.hdr.SlotBytes != 4096) {
			t.Fatalf("batches of %d: %d inline, ring %+v", tc.bs, sc.inline, sc.hdr)
		}
	}
}

// FuzzShmAcks: any sequence of control messages keeps the release count
// cumulative and within the batches sent, or is refused; never a panic.
func FuzzShmAcks(f *testing.F) {
	enc := func(ms ...*servepb.ShmControl) []byte {
		var out []byte
		for _, m := range ms {
			b, _ := proto.Marshal(m)
			out = append(out, byte(len(b)))
			out = append(out, b...)
		}
		return out
	}
	f.Add(enc(&servepb.ShmControl{Released: 1}, &servepb.ShmControl{Released: 3}), uint8(4))
	f.Add(enc(&servepb.ShmControl{Released: 2}, &servepb.ShmControl{Released: 1}), uint8(4))
	f.Add(enc(&servepb.ShmControl{Ring: &servepb.ShmRequest{Slots: 2}}), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, sent uint8) {
		a := &acks{changed: make(chan struct{})}
		prev := uint64(0)
		for len(data) > 0 {
			n := int(data[0])
			data = data[1:]
			if n > len(data) {
				return
			}
			var m servepb.ShmControl
			if err := proto.Unmarshal(data[:n], &m); err != nil {
				return
			}
			data = data[n:]
			err := a.apply(&m, uint64(sent))
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			if a.n < prev || a.n > uint64(sent) || (err == nil && a.n != max(prev, m.Released)) {
				t.Fatalf("released %d after %d (message %v, %d sent, err %v)", a.n, prev, &m, sent, err)
			}
			prev = a.n
		}
	})
}
