package serve

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/serve/servepb"
)

// readShm reads a whole SampleShm stream, releasing each batch.
func readShm(t *testing.T, sc *shmClient) []*servepb.Batch {
	t.Helper()
	var got []*servepb.Batch
	for {
		b, err := sc.next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
		if err := sc.release(uint64(len(got))); err != nil {
			t.Fatal(err)
		}
	}
}

// sameBatch compares a relayed batch with the upstream's own.
func sameBatch(t *testing.T, i int, got, want *servepb.Batch) {
	t.Helper()
	if got.Index != want.Index || got.NumBatches != want.NumBatches || got.BatchSize != want.BatchSize ||
		!slices.Equal(got.NumSampledNodes, want.NumSampledNodes) || !slices.Equal(got.NumSampledEdges, want.NumSampledEdges) {
		t.Fatalf("batch %d: index %d of %d, %d seeds, counts %v %v; want %d of %d, %d, %v %v", i, got.Index, got.NumBatches,
			got.BatchSize, got.NumSampledNodes, got.NumSampledEdges, want.Index, want.NumBatches, want.BatchSize,
			want.NumSampledNodes, want.NumSampledEdges)
	}
	for _, f := range []struct {
		name      string
		got, want *servepb.Tensor
	}{{"n_id", got.NId, want.NId}, {"edge_index", got.EdgeIndex, want.EdgeIndex}, {"input_id", got.InputId, want.InputId},
		{"x", got.X, want.X}, {"y", got.Y, want.Y}, {"edge_label_index", got.EdgeLabelIndex, want.EdgeLabelIndex}} {
		if (f.got == nil) != (f.want == nil) {
			t.Fatalf("batch %d: %s present %v, upstream %v", i, f.name, f.got != nil, f.want != nil)
		}
		if f.got != nil && (!slices.Equal(f.got.Shape, f.want.Shape) || string(f.got.Data) != string(f.want.Data)) {
			t.Fatalf("batch %d: %s %v differs from the upstream's %v", i, f.name, f.got.Shape, f.want.Shape)
		}
	}
}

// A relay over two servers, two streams each, yields through its ring the
// batches the four streams yield directly, round-robin (batch i from
// stream i mod 4), bfloat16 features as they came; link batches too.
func TestRelayEqualsDirect(t *testing.T) {
	dir := ringDir(t)
	_, a1 := start(t, Options{})
	_, a2 := start(t, Options{})
	var ups []*Client
	for _, a := range []string{a1, a1, a2, a2} {
		ups = append(ups, dial(t, a, ClientOptions{BulkReceive: true}))
	}
	rs, raddr := start(t, Options{RingDir: dir, Relay: &Relay{Upstreams: ups}})
	rc := dial(t, raddr, ClientOptions{})
	info, err := rc.Info(context.Background())
	if err != nil || !info.Shm || !slices.Contains(info.Capabilities, CapRelay) || info.NumNodes != tiny(t).NumNodes() {
		t.Fatalf("relay info %v, %v", info, err)
	}
	var ends []int32
	for e := range int32(40) {
		ends = append(ends, e)
	}
	for e := range int32(40) {
		ends = append(ends, (7*e+3)%2000)
	}
	edges := Int32Tensor(ends, 2, 40)
	reqs := map[string]*servepb.SampleRequest{
		"node": {Split: servepb.Split_SPLIT_TRAIN, BatchSize: 40, Fanouts: []int32{5, 3}, Shuffle: true, Seed: 4, Epoch: 1,
			WithFeatures: true, WithLabels: true, Workers: 2, Prefetch: 2},
		"bf16": {Split: servepb.Split_SPLIT_ALL, BatchSize: 300, Fanouts: []int32{4}, Seed: 9, WithFeatures: true,
			FeatureDtype: servepb.DType_DTYPE_BFLOAT16, Workers: 1, Prefetch: 2},
		"link": {BatchSize: 3, Fanouts: []int32{3}, Seed: 2, Link: &servepb.LinkRequest{EdgeLabelIndex: edges, NegAmount: 1}},
	}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			var streams [][]*servepb.Batch
			for k, c := range ups {
				r := proto.Clone(req).(*servepb.SampleRequest)
				r.Part, r.NumParts = uint32(k), uint32(len(ups))
				streams = append(streams, collect(t, c, r))
			}
			var want []*servepb.Batch
			for i := 0; ; i++ {
				k := i % len(ups)
				if i/len(ups) >= len(streams[k]) {
					break
				}
				want = append(want, streams[k][i/len(ups)])
			}
			sc := openShm(t, rc, proto.Clone(req).(*servepb.SampleRequest), &servepb.ShmRequest{Slots: 3})
			sc.narrow = true // the wire's int32 IDs, as they came
			got := readShm(t, sc)
			if len(got) != len(want) || len(got) < 5 {
				t.Fatalf("%d batches through the relay, %d directly", len(got), len(want))
			}
			for i := range got {
				sameBatch(t, i, got[i], want[i])
			}
			if sc.inline != 0 || len(sc.slotsHit) != 3 {
				t.Fatalf("slots used %v, %d inline (notes %q)", sc.slotsHit, sc.inline, sc.notes)
			}
		})
	}
	waitFor(t, "the relay's streams to end", func() bool { return rs.Stats().Streams == 0 })
	if left, _ := filepath.Glob(filepath.Join(dir, "ring-*")); len(left) != 0 {
		t.Fatalf("rings left behind: %v", left)
	}
}

// Routed by partition, the relay interleaves the servers' own batches a
// server at a time, skipping those that have ended: strata_pyg's plan.
func TestRelayByPartition(t *testing.T) {
	ds := tiny(t)
	bk, err := book.Even(ds.NumNodes(), 3)
	if err != nil {
		t.Fatal(err)
	}
	var ups []*Client
	for p := range 3 {
		_, a := start(t, Options{Partition: &Partition{Book: bk, Part: p}})
		ups = append(ups, dial(t, a, ClientOptions{}))
	}
	_, raddr := start(t, Options{RingDir: ringDir(t), Relay: &Relay{Upstreams: ups, ByPartition: true}})
	rc := dial(t, raddr, ClientOptions{})
	// Uneven seeds: part 0 owns most, so its stream runs longest.
	var seeds []int32
	for v := range int32(ds.NumNodes()) {
		if v < 700 || v%9 == 0 {
			seeds = append(seeds, v)
		}
	}
	req := &servepb.SampleRequest{Seeds: Int32Tensor(seeds, int64(len(seeds))), BatchSize: 50, Fanouts: []int32{3, 2},
		Shuffle: true, Seed: 3, WithLabels: true, Owned: true}
	var streams [][]*servepb.Batch
	rounds := 0
	for _, c := range ups {
		s := collect(t, c, proto.Clone(req).(*servepb.SampleRequest))
		streams = append(streams, s)
		rounds = max(rounds, len(s))
	}
	var want []*servepb.Batch
	for r := range rounds {
		for _, s := range streams {
			if r < len(s) {
				want = append(want, s[r])
			}
		}
	}
	if len(streams[0]) <= len(streams[1]) {
		t.Fatalf("streams of %d and %d batches: want part 0's longer", len(streams[0]), len(streams[1]))
	}
	sc := openShm(t, rc, proto.Clone(req).(*servepb.SampleRequest), &servepb.ShmRequest{Slots: 4})
	sc.narrow = true
	got := readShm(t, sc)
	if len(got) != len(want) {
		t.Fatalf("%d batches through the relay, %d directly", len(got), len(want))
	}
	for i := range got {
		sameBatch(t, i, got[i], want[i])
	}
}

// The relay writes a slot only once its previous batch is released, and
// refuses what it cannot serve.
func TestRelayFlowControlAndRefusals(t *testing.T) {
	_, a := start(t, Options{})
	up := dial(t, a, ClientOptions{})
	rs, raddr := start(t, Options{RingDir: ringDir(t), Relay: &Relay{Upstreams: []*Client{up}}})
	rc := dial(t, raddr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}, Prefetch: 1}
	sc := openShm(t, rc, req, &servepb.ShmRequest{Slots: 3})
	sc.narrow = true
	for range 3 {
		if _, err := sc.next(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the relay to wait for a release", func() bool { return rs.Stats().Blocked == 1 })
	if st := rs.Stats(); st.Sent != 3 {
		t.Fatalf("relay stats %+v: want 3 batches sent while the client holds every slot", st)
	}
	if err := sc.release(1); err != nil {
		t.Fatal(err)
	}
	b, err := sc.next()
	if err != nil || b.Index != 3 || sc.slotsHit[0] != 2 {
		t.Fatalf("batch 3: %v, %v (slots %v)", b.GetIndex(), err, sc.slotsHit)
	}
	waitFor(t, "the relay to wait again", func() bool { return rs.Stats().Blocked == 1 && rs.Stats().Sent == 4 })
	sc.close()

	if got := collectErr(rc, &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}}); code(got) != codes.Unimplemented {
		t.Fatalf("Sample on a relay: %v", got)
	}
	for _, r := range []*servepb.SampleRequest{
		{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}, Part: 1, NumParts: 2},
		{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, Fanouts: []int32{3}, Owned: true},
		{Split: servepb.Split_SPLIT_ALL, BatchSize: 20, InputType: "paper"},
	} {
		sc := openShm(t, rc, r, &servepb.ShmRequest{})
		if _, err := sc.s.Recv(); code(err) != codes.InvalidArgument {
			t.Fatalf("request %v: %v, want InvalidArgument", r, err)
		}
	}
}

func collectErr(c *Client, req *servepb.SampleRequest) error {
	bs, err := c.Sample(context.Background(), req)
	if err != nil {
		return err
	}
	defer bs.Close()
	for {
		if _, err := bs.Recv(); err != nil {
			return err
		}
	}
}

// An upstream server that goes away ends the relay's stream with an
// error that names it.
func TestRelayUpstreamGone(t *testing.T) {
	// Small windows: the epoch cannot all be on its way before the stop.
	up, a := start(t, Options{WindowBytes: 64 << 10})
	c := dial(t, a, ClientOptions{WindowBytes: 64 << 10})
	_, raddr := start(t, Options{RingDir: ringDir(t), Relay: &Relay{Upstreams: []*Client{c}}})
	rc := dial(t, raddr, ClientOptions{})
	sc := openShm(t, rc, &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 10, Fanouts: []int32{3}, Prefetch: 1,
		WithFeatures: true}, &servepb.ShmRequest{Slots: 2})
	sc.narrow = true
	if _, err := sc.next(); err != nil {
		t.Fatal(err)
	}
	up.Stop()
	// Info names the upstream, and says the relay itself is up.
	if _, err := rc.Info(context.Background()); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "server "+a) {
		t.Fatalf("Info with the upstream gone: %v", err)
	}
	var err error
	for n := uint64(1); err == nil; n++ {
		if err = sc.release(n); err == nil {
			_, err = sc.next()
		}
	}
	if code(err) != codes.Unavailable && code(err) != codes.Canceled || !strings.Contains(err.Error(), "server "+a) {
		t.Fatalf("after the upstream stopped: %v (want UNAVAILABLE naming %s)", err, a)
	}
}

// decodeBatchAliased decodes as proto.Unmarshal does, with the tensors'
// data left in the message's bytes.
func TestDecodeBatchAliased(t *testing.T) {
	m := &servepb.Batch{Index: 3, NumBatches: 9, NId: Int32Tensor([]int32{4, 5, 6}, 3), X: &servepb.Tensor{Dtype: servepb.DType_DTYPE_BFLOAT16, Shape: []int64{3, 2}, Data: []byte("abcdefghijkl")},
		NumSampledNodes: []int64{1, 2}, BatchSize: 1, Note: "n", Timing: &servepb.BatchTiming{SampleNs: 7}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := &servepb.Batch{}
	if err := decodeBatchAliased(b, got); err != nil || !proto.Equal(got, m) {
		t.Fatalf("decoded %v, %v; want %v", got, err, m)
	}
	x := got.X.Data
	if i := strings.Index(string(b), "abcdefghijkl"); i < 0 || &b[i] != &x[0] {
		t.Fatal("x was copied out of the message")
	}
	// A repeated tensor field is merged, as proto does.
	twice := append(slices.Clone(b), b...)
	want := &servepb.Batch{}
	if err := proto.Unmarshal(twice, want); err != nil {
		t.Fatal(err)
	}
	if err := decodeBatchAliased(twice, got); err != nil || !proto.Equal(got, want) {
		t.Fatalf("twice: %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]byte{b[:len(b)-3], {0x1a, 0x05, 0x08}, {0x1a, 0x02, 0x1a, 0x09}} {
		if err := decodeBatchAliased(bad, got); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}

func FuzzDecodeBatchAliased(f *testing.F) {
	for _, m := range []*servepb.Batch{
		{Index: 1, NId: Int32Tensor([]int32{1, 2}, 2), EdgeIndex: Int32Tensor([]int32{0, 1, 1, 0}, 2, 2), Y: Int32Tensor([]int32{-1, 3}, 2)},
		{X: &servepb.Tensor{Dtype: servepb.DType_DTYPE_FLOAT32, Shape: []int64{1, 1}, Data: []byte{0, 0, 128, 63}}, Note: "x"},
		{Shm: &servepb.ShmSlot{Path: "/p", Slot: 2}, Nodes: []*servepb.TypedNodes{{Type: 1}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := &servepb.Batch{}, &servepb.Batch{}
		err := decodeBatchAliased(b, got)
		werr := proto.Unmarshal(b, want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("aliased: %v, proto: %v", err, werr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("aliased %v, proto %v", got, want)
		}
	})
}

// splitAt cuts b into pieces at the given offsets (mod len(b)+1, sorted),
// as gRPC hands a message over in frames.
func splitAt(b []byte, cuts []byte) [][]byte {
	var at []int
	for _, c := range cuts {
		at = append(at, int(c)*7%(len(b)+1))
	}
	slices.Sort(at)
	var out [][]byte
	lo := 0
	for _, a := range at {
		out = append(out, b[lo:a])
		lo = a
	}
	return append(out, b[lo:])
}

// decodeSegments decodes pieces with decodeBatchSegments and puts each
// tensor's data back into it, to compare with proto.Unmarshal.
func decodeSegments(segs [][]byte) (*servepb.Batch, error) {
	m := &servepb.Batch{}
	data, err := decodeBatchSegments(segs, m)
	if err != nil {
		return nil, err
	}
	for num, at := range batchTensorFields {
		t := *at(m)
		if t == nil {
			if len(data[num]) > 0 {
				return nil, fmt.Errorf("field %d: data without a tensor", num)
			}
			continue
		}
		if t.Data != nil {
			return nil, fmt.Errorf("field %d: data left in the message", num)
		}
		in := &relayIn{data: data}
		t.Data = in.bytes(num)
	}
	return m, nil
}

// decodeBatchSegments decodes a message in pieces as proto.Unmarshal
// decodes it whole, wherever the pieces are cut, with the tensors' data
// left in the pieces.
func TestDecodeBatchSegments(t *testing.T) {
	m := &servepb.Batch{Index: 3, NumBatches: 9, NId: Int32Tensor([]int32{4, 5, 6}, 3), X: &servepb.Tensor{Dtype: servepb.DType_DTYPE_BFLOAT16, Shape: []int64{3, 2}, Data: []byte("abcdefghijkl")},
		NumSampledNodes: []int64{1, 2}, BatchSize: 1, Note: "n", Timing: &servepb.BatchTiming{SampleNs: 7}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut <= len(b); cut++ {
		for step := 1; step <= 5; step++ {
			var segs [][]byte
			segs = append(segs, b[:cut])
			for lo := cut; lo < len(b); lo += step {
				segs = append(segs, b[lo:min(lo+step, len(b))])
			}
			got, err := decodeSegments(segs)
			if err != nil || !proto.Equal(got, m) {
				t.Fatalf("cut %d step %d: %v, %v; want %v", cut, step, got, err, m)
			}
		}
	}
	// The data is left in the pieces: x's 12 bytes in 3 pieces of 4.
	at := strings.Index(string(b), "abcdefghijkl")
	segs := [][]byte{b[:at], b[at : at+4], b[at+4 : at+8], b[at+8:]}
	data, err := decodeBatchSegments(segs, &servepb.Batch{})
	if err != nil || len(data[9]) != 3 || &data[9][0][0] != &b[at] || &data[9][2][3] != &b[at+11] {
		t.Fatalf("x in %d pieces, %v: not the message's own bytes", len(data[9]), err)
	}
	// A repeated tensor field is merged, as proto does.
	twice := append(slices.Clone(b), b...)
	want := &servepb.Batch{}
	if err := proto.Unmarshal(twice, want); err != nil {
		t.Fatal(err)
	}
	if got, err := decodeSegments(splitAt(twice, []byte{3, 9, 20})); err != nil || !proto.Equal(got, want) {
		t.Fatalf("twice: %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]byte{b[:len(b)-3], {0x1a, 0x05, 0x08}, {0x1a, 0x02, 0x1a, 0x09}, {0x4a, 0x80}} {
		if _, err := decodeSegments(splitAt(bad, []byte{1})); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}

func FuzzDecodeBatchSegments(f *testing.F) {
	for _, m := range []*servepb.Batch{
		{Index: 1, NId: Int32Tensor([]int32{1, 2}, 2), EdgeIndex: Int32Tensor([]int32{0, 1, 1, 0}, 2, 2), Y: Int32Tensor([]int32{-1, 3}, 2)},
		{X: &servepb.Tensor{Dtype: servepb.DType_DTYPE_FLOAT32, Shape: []int64{1, 1}, Data: []byte{0, 0, 128, 63}}, Note: "x"},
		{Shm: &servepb.ShmSlot{Path: "/p", Slot: 2}, Nodes: []*servepb.TypedNodes{{Type: 1}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b, []byte{2, 5})
	}
	f.Add([]byte{0x4b, 0x0c, 0x4c}, []byte{1}) // a group where x is
	f.Fuzz(func(t *testing.T, b, cuts []byte) {
		want := &servepb.Batch{}
		werr := proto.Unmarshal(b, want)
		got, err := decodeSegments(splitAt(b, cuts))
		if (err == nil) != (werr == nil) {
			t.Fatalf("segments: %v, proto: %v", err, werr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("segments %v, proto %v", got, want)
		}
	})
}
