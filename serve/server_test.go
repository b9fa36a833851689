package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
)

// start runs a server for opt on a loopback port; it is stopped when the
// test ends.
func start(t testing.TB, opt Options) (*Server, string) {
	t.Helper()
	if opt.Dataset == nil && opt.Hetero == nil {
		opt.Dataset = tiny(t)
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

func dial(t testing.TB, addr string, opt ClientOptions) *Client {
	t.Helper()
	if opt.Timeout == 0 {
		opt.Timeout = 20 * time.Second
	}
	c, err := Dial(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// collect reads a whole stream.
func collect(t *testing.T, c *Client, req *servepb.SampleRequest) []*servepb.Batch {
	t.Helper()
	bs, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	var out []*servepb.Batch
	for {
		b, err := bs.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}

func int32s(t *testing.T, m *servepb.Tensor) []int32 {
	t.Helper()
	if _, err := CheckTensor(m, "t"); err != nil || m.Dtype != servepb.DType_DTYPE_INT32 {
		t.Fatalf("%v (%v)", err, m.GetDtype())
	}
	v := make([]int32, len(m.Data)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(m.Data[4*i:]))
	}
	return v
}

func int64s(t *testing.T, m *servepb.Tensor) []int64 {
	t.Helper()
	if _, err := CheckTensor(m, "t"); err != nil || m.Dtype != servepb.DType_DTYPE_INT64 {
		t.Fatalf("%v (%v)", err, m.GetDtype())
	}
	v := make([]int64, len(m.Data)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(m.Data[8*i:]))
	}
	return v
}

func float32s(t *testing.T, m *servepb.Tensor) []float32 {
	t.Helper()
	if _, err := CheckTensor(m, "t"); err != nil || m.Dtype != servepb.DType_DTYPE_FLOAT32 {
		t.Fatalf("%v (%v)", err, m.GetDtype())
	}
	v := make([]float32, len(m.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(m.Data[4*i:]))
	}
	return v
}

// expect computes, without the server, what batch i of req must be: the
// seeds Plan gives, sampled by a fresh NeighborSampler as a MiniBatch
// (what `strata train` samples) and converted with FromMiniBatch.
func expect(t *testing.T, ds *dataset.Dataset, req *servepb.SampleRequest, seeds []graph.NodeID, i int) (*PyGBatch, []int64) {
	t.Helper()
	f := make([]int, len(req.Fanouts))
	for k, v := range req.Fanouts {
		f[k] = int(v)
	}
	ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: f, Replace: req.Replace})
	if err != nil {
		t.Fatal(err)
	}
	e := Epoch{BatchSize: int(req.BatchSize), Shuffle: req.Shuffle, Seed: req.Seed, Epoch: int(req.Epoch),
		DropLast: req.DropLast, Rank: int(req.Rank), World: max(1, int(req.WorldSize))}
	order, err := Plan(len(seeds), e)
	if err != nil {
		t.Fatal(err)
	}
	pos := order[i*e.BatchSize : min((i+1)*e.BatchSize, len(order))]
	bs := make([]graph.NodeID, len(pos))
	in := make([]int64, len(pos))
	for k, p := range pos {
		bs[k], in[k] = seeds[p], int64(p)
	}
	mb, err := ns.Sample(bs, e.Key(i))
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromMiniBatch(mb, NewRelabeler(ds.NumNodes()), ds.NumNodes())
	if err != nil {
		t.Fatal(err)
	}
	return b, in
}

// checkBatch compares a received batch with the expected one, features
// and labels included.
func checkBatch(t *testing.T, ds *dataset.Dataset, got *servepb.Batch, want *PyGBatch, inputID []int64) {
	t.Helper()
	nid := int32s(t, got.NId)
	if !slices.Equal(nid, want.NodeIDs) {
		t.Fatalf("batch %d: n_id differs", got.Index)
	}
	ei := int32s(t, got.EdgeIndex)
	ne := len(want.Src)
	if !slices.Equal(got.EdgeIndex.Shape, []int64{2, int64(ne)}) || !slices.Equal(ei[:ne], want.Src) || !slices.Equal(ei[ne:], want.Dst) {
		t.Fatalf("batch %d: edge_index differs", got.Index)
	}
	if !slices.Equal(got.NumSampledNodes, want.NumSampledNodes) || !slices.Equal(got.NumSampledEdges, want.NumSampledEdges) ||
		int(got.BatchSize) != want.BatchSize || !slices.Equal(int64s(t, got.InputId), inputID) {
		t.Fatalf("batch %d: counts or input_id differ", got.Index)
	}
	if got.X != nil {
		x := float32s(t, got.X)
		for k, v := range nid {
			if !slices.Equal(x[k*ds.FeatDim:(k+1)*ds.FeatDim], ds.Features[int(v)*ds.FeatDim:(int(v)+1)*ds.FeatDim]) {
				t.Fatalf("batch %d: x row %d is not node %d's features", got.Index, k, v)
			}
		}
	}
	if got.Y != nil {
		for k, y := range int32s(t, got.Y) {
			if y != ds.Labels[nid[k]] {
				t.Fatalf("batch %d: y[%d] = %d, node %d's label is %d", got.Index, k, y, nid[k], ds.Labels[nid[k]])
			}
		}
	}
}

func TestSampleMatchesSampler(t *testing.T) {
	ds := tiny(t)
	_, addr := start(t, Options{})
	c := dial(t, addr, ClientOptions{})
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumNodes != ds.NumNodes() || info.FeatDim != int64(ds.FeatDim) || info.NumTrain != int64(len(ds.Train)) ||
		info.ProtocolVersion != ProtocolVersion || info.Device != "cpu" {
		t.Fatalf("info %+v", info)
	}
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 64, Fanouts: []int32{5, 3, 2},
		Shuffle: true, Seed: 11, Epoch: 2, Rank: 1, WorldSize: 2, WithFeatures: true, WithLabels: true, Workers: 3}
	got := collect(t, c, req)
	nb := NumBatches(len(ds.Train), 64, 2, false)
	if len(got) != nb || nb < 3 {
		t.Fatalf("%d batches, want %d", len(got), nb)
	}
	for i, b := range got {
		if int(b.Index) != i || int(b.NumBatches) != nb {
			t.Fatalf("batch %d says index %d of %d", i, b.Index, b.NumBatches)
		}
		want, in := expect(t, ds, req, ds.Train, i)
		checkBatch(t, ds, b, want, in)
	}
	// Explicit seeds (int64) and two servers' parts: the same batches as
	// one stream, whatever the workers.
	seeds := make([]int64, 300)
	for i := range seeds {
		seeds[i] = int64((i * 7) % int(ds.NumNodes()))
	}
	req = &servepb.SampleRequest{Seeds: Int64Tensor(seeds), BatchSize: 32, Fanouts: []int32{4, -1}, Seed: 3, Workers: 1}
	whole := collect(t, c, req)
	var parts []*servepb.Batch
	for p := range 3 {
		r := proto.Clone(req).(*servepb.SampleRequest)
		r.Part, r.NumParts, r.Workers = uint32(p), 3, 4
		for _, b := range collect(t, c, r) {
			if int(b.Index)%3 != p {
				t.Fatalf("part %d got batch %d", p, b.Index)
			}
			parts = append(parts, b)
		}
	}
	slices.SortFunc(parts, func(a, b *servepb.Batch) int { return int(a.Index) - int(b.Index) })
	if len(whole) != 10 || len(parts) != len(whole) {
		t.Fatalf("%d and %d batches, want 10", len(whole), len(parts))
	}
	ids := make([]graph.NodeID, len(seeds))
	for i, v := range seeds {
		ids[i] = graph.NodeID(v)
	}
	for i := range whole {
		want, in := expect(t, ds, req, ids, i)
		checkBatch(t, ds, whole[i], want, in)
		checkBatch(t, ds, parts[i], want, in)
	}
}

// mfgOnly hides NeighborSampler's SampleHop, as a GPU sampler has none:
// the server then goes through MiniBatches.
type mfgOnly struct{ s *sample.NeighborSampler }

func (m mfgOnly) Sample(seeds []graph.NodeID, key sample.Key) (*sample.MiniBatch, error) {
	return m.s.Sample(seeds, key)
}

func TestSampleThroughMiniBatches(t *testing.T) {
	ds := tiny(t)
	var made [][]int
	_, addr := start(t, Options{Device: "mfg:2", NewSamplers: func(f []int, replace bool) ([]sample.Sampler, error) {
		made = append(made, f)
		var out []sample.Sampler
		for range 2 {
			ns, err := sample.NewNeighborSampler(ds.InGraph(), sample.Config{Fanouts: f, Replace: replace})
			if err != nil {
				return nil, err
			}
			out = append(out, mfgOnly{ns})
		}
		return out, nil
	}})
	c := dial(t, addr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_VAL, BatchSize: 50, Fanouts: []int32{6, 2}, Seed: 5, Workers: 2, WithLabels: true}
	got := collect(t, c, req)
	if len(got) != NumBatches(len(ds.Val), 50, 1, false) {
		t.Fatalf("%d batches", len(got))
	}
	for i, b := range got {
		want, in := expect(t, ds, req, ds.Val, i)
		checkBatch(t, ds, b, want, in)
	}
	collect(t, c, req)
	if len(made) != 1 {
		t.Fatalf("samplers made %d times for one configuration", len(made))
	}
}

func TestSeveralClients(t *testing.T) {
	ds := tiny(t)
	_, addr := start(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for k := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(addr, ClientOptions{Timeout: 20 * time.Second})
			if err != nil {
				errs <- err.Error()
				return
			}
			defer c.Close()
			req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 100, Fanouts: []int32{3, 3}, Shuffle: true, Seed: uint64(k), Workers: 2}
			bs, err := c.Sample(context.Background(), req)
			if err != nil {
				errs <- err.Error()
				return
			}
			n := 0
			for {
				b, err := bs.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err.Error()
					return
				}
				want, _ := expect(t, ds, req, ds.Train, n)
				if !slices.Equal(b.NumSampledEdges, want.NumSampledEdges) || int(b.Index) != n {
					errs <- "client got a wrong batch"
					return
				}
				n++
			}
			if n != NumBatches(len(ds.Train), 100, 1, false) {
				errs <- "client got too few batches"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestFeatures(t *testing.T) {
	ds := tiny(t)
	_, addr := start(t, Options{})
	c := dial(t, addr, ClientOptions{})
	ids := []graph.NodeID{7, 0, 1999, 7}
	r, err := c.Features(context.Background(), ids, true, true)
	if err != nil {
		t.Fatal(err)
	}
	x, y := float32s(t, r.X), int32s(t, r.Y)
	for k, v := range ids {
		if !slices.Equal(x[k*ds.FeatDim:(k+1)*ds.FeatDim], ds.Features[int(v)*ds.FeatDim:(int(v)+1)*ds.FeatDim]) || y[k] != ds.Labels[v] {
			t.Fatalf("row %d (node %d) differs", k, v)
		}
	}
	_, err = c.Features(context.Background(), []graph.NodeID{2000}, true, false)
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), "ids[0]") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("node out of range: %v", err)
	}
	if _, err = c.Features(context.Background(), ids, false, false); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Fatalf("nothing asked: %v", err)
	}
}

// code is the gRPC code of a Client error (which wraps the status).
func code(err error) codes.Code {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}

func TestRefusals(t *testing.T) {
	_, addr := start(t, Options{MaxSendBytes: 64 << 10, MaxRecvBytes: 16 << 10, MaxPrefetch: 8, MaxWorkers: 4})
	c := dial(t, addr, ClientOptions{})
	ok := func() *servepb.SampleRequest {
		return &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 8, Fanouts: []int32{2}}
	}
	for _, tc := range []struct {
		name string
		edit func(r *servepb.SampleRequest)
		code codes.Code
		says string
	}{
		{"batch 0", func(r *servepb.SampleRequest) { r.BatchSize = 0 }, codes.InvalidArgument, "batch_size"},
		{"no fanouts", func(r *servepb.SampleRequest) { r.Fanouts = nil }, codes.InvalidArgument, "fanouts"},
		{"fanout 0", func(r *servepb.SampleRequest) { r.Fanouts = []int32{3, 0} }, codes.InvalidArgument, "fanouts[1]"},
		{"rank", func(r *servepb.SampleRequest) { r.Rank, r.WorldSize = 2, 2 }, codes.InvalidArgument, "rank"},
		{"part", func(r *servepb.SampleRequest) { r.Part = 1 }, codes.InvalidArgument, "part"},
		{"workers", func(r *servepb.SampleRequest) { r.Workers = 5 }, codes.InvalidArgument, "workers"},
		{"prefetch", func(r *servepb.SampleRequest) { r.Prefetch = 9 }, codes.InvalidArgument, "prefetch"},
		{"no split", func(r *servepb.SampleRequest) { r.Split = 0 }, codes.InvalidArgument, "neither seeds nor a split"},
		{"both", func(r *servepb.SampleRequest) { r.Seeds = Int32Tensor([]int32{1}, 1) }, codes.InvalidArgument, "give one of them"},
		{"duplicate", func(r *servepb.SampleRequest) { r.Split, r.Seeds = 0, Int32Tensor([]int32{1, 5, 1}, 3) }, codes.InvalidArgument, "seeds[2]"},
		{"range", func(r *servepb.SampleRequest) { r.Split, r.Seeds = 0, Int32Tensor([]int32{1, 2000}, 2) }, codes.InvalidArgument, "seeds[1]"},
		// 64 KiB of replies cannot hold a batch with features.
		{"reply too large", func(r *servepb.SampleRequest) { r.BatchSize, r.Fanouts, r.WithFeatures = 200, []int32{10, 10}, true }, codes.ResourceExhausted, "over this server's limit"},
		// 16 KiB of requests cannot hold 5,000 seeds.
		{"request too large", func(r *servepb.SampleRequest) { r.Split, r.Seeds = 0, Int32Tensor(make([]int32, 5000), 5000) }, codes.ResourceExhausted, "larger than max"},
	} {
		r := ok()
		tc.edit(r)
		bs, err := c.Sample(context.Background(), r)
		if err == nil {
			_, err = bs.Recv()
		}
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: %v, want %v saying %q and naming the server", tc.name, err, tc.code, tc.says)
		}
	}
	// A client of another protocol version is refused by name.
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = servepb.NewSamplerClient(conn).Info(context.Background(), &servepb.InfoRequest{ProtocolVersion: 2})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "protocol 2") {
		t.Fatalf("version 2: %v", err)
	}
}

func TestSecret(t *testing.T) {
	_, addr := start(t, Options{Secret: []byte("s3cret")})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TEST, BatchSize: 500, Fanouts: []int32{2}}
	for _, secret := range []string{"", "wrong", "s3cret "} {
		c := dial(t, addr, ClientOptions{Secret: []byte(secret)})
		if _, err := c.Info(context.Background()); code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "secret") {
			t.Fatalf("secret %q: %v", secret, err)
		}
		bs, err := c.Sample(context.Background(), req)
		if err == nil {
			_, err = bs.Recv()
		}
		if code(err) != codes.Unauthenticated {
			t.Fatalf("secret %q, Sample: %v", secret, err)
		}
	}
	c := dial(t, addr, ClientOptions{Secret: []byte("s3cret")})
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(collect(t, c, req)); n != 2 {
		t.Fatalf("%d batches", n)
	}
	// Health needs no secret.
	hc := healthpb.NewHealthClient(c.conn)
	r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "strata.v1.Sampler"})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
}

func TestMutualTLS(t *testing.T) {
	ca, cert, key, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := auth.MutualTLS(cert, key, ca, "")
	if err != nil {
		t.Fatal(err)
	}
	ca2, cert2, key2, _ := auth.NewTestPKI("strata")
	other, err := auth.MutualTLS(cert2, key2, ca2, "")
	if err != nil {
		t.Fatal(err)
	}
	_, addr := start(t, Options{TLS: cfg})
	if _, err := dial(t, addr, ClientOptions{TLS: cfg}).Info(context.Background()); err != nil {
		t.Fatalf("same CA: %v", err)
	}
	// A plain client, and one whose certificate another CA signed, are
	// refused before any request runs.
	for name, o := range map[string]ClientOptions{"plain": {}, "other CA": {TLS: other}} {
		o.Timeout = 5 * time.Second
		if _, err := dial(t, addr, o).Info(context.Background()); code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable", name, err)
		}
	}
	// A client with no certificate of its own, trusting the server: the
	// server requires one.
	noCert := cfg.Clone()
	noCert.Certificates = nil
	if _, err := dial(t, addr, ClientOptions{TLS: noCert, Timeout: 5 * time.Second}).Info(context.Background()); err == nil {
		t.Error("a client without a certificate was served")
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr string
		tls  bool
		ok   bool
	}{
		{"127.0.0.1:7000", false, true}, {"[::1]:0", false, true}, {"localhost:1", false, true}, {"unix:/tmp/s.sock", false, true},
		{"unix:///tmp/s.sock", false, true}, {"0.0.0.0:7000", false, false}, {":7000", false, false}, {"10.1.2.3:7000", false, false},
		{"0.0.0.0:7000", true, true}, {":7000", true, true}, {"127.0.0.1", false, false}, {"unix:", false, false},
	} {
		err := CheckListen(c.addr, c.tls)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %v) = %v, want ok=%v", c.addr, c.tls, err, c.ok)
		}
		if err != nil && c.addr == "0.0.0.0:7000" && !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("%v does not say how to fix it", err)
		}
	}
}

func TestUnixSocket(t *testing.T) {
	p := t.TempDir() + "/s.sock"
	s, err := New(Options{Dataset: tiny(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("unix://" + p)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	if _, err := Listen("unix:" + p); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("second listener: %v", err)
	}
	c := dial(t, "unix:"+p, ClientOptions{})
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or 20 s pass (then the test fails,
// saying what it waited for): a wait, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestFlowControl(t *testing.T) {
	ds := tiny(t)
	const prefetch = 3
	s, addr := start(t, Options{WindowBytes: 64 << 10})
	c := dial(t, addr, ClientOptions{WindowBytes: 64 << 10})
	// Batches of ~100 KB (features of ~1,500 nodes) against 64 KiB windows.
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 100, Fanouts: []int32{10, 10}, WithFeatures: true,
		Workers: 2, Prefetch: prefetch}
	bs, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	first, err := bs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.X == nil || len(first.X.Data) < 64<<10 {
		t.Fatalf("first batch has %d bytes of features, want more than a window", len(first.X.GetData()))
	}
	// The client reads nothing more: sampling stops once the queue is full.
	waitFor(t, "the stream to block on its client", func() bool { return s.Stats().Blocked == 1 })
	st := s.Stats()
	// In flight: what gRPC accepted (at most ~2 messages: one window plus
	// one write quota of 64 KiB) and the prefetch queue.
	if st.Sent > 4 || st.Produced > st.Sent+prefetch {
		t.Fatalf("client stalled: %+v; want at most 4 sent and %d queued", st, prefetch)
	}
	if total := NumBatches(int(ds.NumNodes()), 100, 1, false); st.Produced >= int64(total) {
		t.Fatalf("all %d batches were sampled for a stalled client", total)
	}
	// Reading resumes the stream, in order, to the end.
	n := 1
	for {
		b, err := bs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if int(b.Index) != n {
			t.Fatalf("batch %d came as %d", b.Index, n)
		}
		n++
	}
	if n != 20 {
		t.Fatalf("%d batches", n)
	}
	waitFor(t, "the queue to empty", func() bool { st := s.Stats(); return st.Queued == 0 && st.Streams == 0 })
}

func TestDrain(t *testing.T) {
	ds := tiny(t)
	s, err := New(Options{Dataset: ds, WindowBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := dial(t, addr, ClientOptions{WindowBytes: 64 << 10})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 100, Fanouts: []int32{10, 10}, WithFeatures: true, Prefetch: 2}
	// A stream being read finishes during the drain; a stalled one is cut
	// at the deadline.
	reading, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reading.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled stream to block", func() bool { return s.Stats().Blocked >= 1 })
	drained := make(chan bool, 1)
	go func() { drained <- s.Drain(3 * time.Second) }()
	waitFor(t, "new connections to be refused", func() bool {
		c2, err := Dial(addr, ClientOptions{Timeout: time.Second})
		if err != nil {
			return true
		}
		defer c2.Close()
		_, err = c2.Info(context.Background())
		return code(err) == codes.Unavailable
	})
	n := 1
	for {
		_, err := reading.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream being read failed during the drain: %v", err)
		}
		n++
	}
	if n != 20 {
		t.Fatalf("%d batches during the drain, want 20", n)
	}
	if clean := <-drained; clean {
		t.Fatal("Drain reports a clean stop although a stream was stalled")
	}
	var rerr error
	for rerr == nil {
		_, rerr = stalled.Recv()
	}
	if code(rerr) != codes.Unavailable && code(rerr) != codes.Canceled {
		t.Fatalf("stalled stream after the deadline: %v", rerr)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

func TestMaxStreams(t *testing.T) {
	_, addr := start(t, Options{MaxStreams: 1, WindowBytes: 64 << 10})
	c := dial(t, addr, ClientOptions{WindowBytes: 64 << 10})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_ALL, BatchSize: 100, Fanouts: []int32{10, 10}, WithFeatures: true}
	a, err := c.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Recv(); err != nil {
		t.Fatal(err)
	}
	b, err := c.Sample(context.Background(), req)
	if err == nil {
		_, err = b.Recv()
	}
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams") {
		t.Fatalf("second stream: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	_, addr := start(t, Options{Metrics: m})
	c := dial(t, addr, ClientOptions{})
	got := collect(t, c, &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 100, Fanouts: []int32{3}})
	c.Features(context.Background(), []graph.NodeID{1, 2, 3}, true, false)
	c.Features(context.Background(), []graph.NodeID{5000}, true, false)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	val := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.Metric {
			name := f.GetName()
			for _, l := range mt.Label {
				name += "," + l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				val[name] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				val[name] = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				val[name] = float64(mt.Histogram.GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"strata_serve_batches_total": float64(len(got)), "strata_serve_batch_seconds": float64(len(got)),
		"strata_serve_feature_rows_total": 3, "strata_serve_errors_total,InvalidArgument,Features": 1,
		"strata_serve_queue_depth": 0, "strata_serve_streams": 0,
	}
	for k, v := range want {
		if val[k] != v {
			t.Errorf("%s = %v, want %v", k, val[k], v)
		}
	}
	if val["strata_serve_sent_bytes_total,Sample"] < float64(len(got))*100*4 {
		t.Errorf("sent bytes %v for %d batches", val["strata_serve_sent_bytes_total,Sample"], len(got))
	}
	if !reflect.DeepEqual(len(got), NumBatches(len(tiny(t).Train), 100, 1, false)) {
		t.Fatal("batch count")
	}
}
