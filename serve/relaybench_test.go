package serve

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/serve/servepb"
)

// rawUpstream is a Sample server that sends the same pre-encoded batch
// message over and over (no sampling, no encoding): what is left of a
// stream's cost is gRPC's send and the relay's receive.
type rawUpstream struct {
	servepb.UnimplementedSamplerServer
	msg []byte
	n   int // batches an epoch
}

type rawMsg []byte

type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	}
	return c.proto.Marshal(v)
}
func (c rawCodec) Unmarshal(d mem.BufferSlice, v any) error { return c.proto.Unmarshal(d, v) }
func (rawCodec) Name() string                               { return "proto" }

func (u *rawUpstream) Sample(req *servepb.SampleRequest, ss servepb.Sampler_SampleServer) error {
	parts := max(int(req.NumParts), 1)
	for i := int(req.Part); i < u.n; i += parts {
		if err := ss.SendMsg(rawMsg(u.msg)); err != nil {
			return err
		}
	}
	return nil
}

// startRawUpstream serves u on a loopback port with the server's window.
func startRawUpstream(tb testing.TB, u *rawUpstream) string {
	tb.Helper()
	g := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{encoding.GetCodecV2("proto")}),
		grpc.MaxSendMsgSize(1<<30), grpc.WriteBufferSize(DefaultIOBufferBytes), grpc.InitialWindowSize(DefaultWindowBytes), grpc.InitialConnWindowSize(DefaultWindowBytes))
	servepb.RegisterSamplerServer(g, u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go g.Serve(ln)
	tb.Cleanup(g.Stop)
	return ln.Addr().String()
}

// bigBatch is a products-like batch message: nodes IDs (int32), 2.2
// edges a node, bfloat16 features of dim 100, seeds' labels.
func bigBatch(nodes int) *servepb.Batch {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		return b
	}
	const dim, seeds = 100, 1024
	edges := int64(nodes) * 22 / 10
	return &servepb.Batch{Index: 0, NumBatches: 1, BatchSize: seeds,
		NumSampledNodes: []int64{seeds, int64(nodes) - seeds}, NumSampledEdges: []int64{edges},
		NId:       &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{int64(nodes)}, Data: fill(4 * nodes)},
		EdgeIndex: &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{2, edges}, Data: fill(8 * int(edges))},
		InputId:   &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{seeds}, Data: fill(8 * seeds)},
		X:         &servepb.Tensor{Dtype: servepb.DType_DTYPE_BFLOAT16, Shape: []int64{int64(nodes), dim}, Data: fill(2 * dim * nodes)},
		Y:         &servepb.Tensor{Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{seeds}, Data: fill(8 * seeds)},
	}
}

// BenchmarkRelay measures the relay alone: upstream streams that send a
// pre-encoded batch of ~60 MiB (products-hard at 0.25 with bfloat16
// features: 280,000 nodes), the relay's receive, decode and copy into
// its ring, and a client that releases each batch at once. One op is one
// batch through the ring.
//
//	go test -run '^$' -bench Relay -benchtime 40x ./serve
func BenchmarkRelay(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			benchRelay(b, streams, 280_000)
		})
	}
}

func benchRelay(b *testing.B, streams, nodes int) {
	msg, err := proto.Marshal(bigBatch(nodes))
	if err != nil {
		b.Fatal(err)
	}
	addr := startRawUpstream(b, &rawUpstream{msg: msg, n: b.N})
	var ups []*Client
	for range streams {
		ups = append(ups, dial(b, addr, ClientOptions{MaxRecvBytes: 1 << 30, BulkReceive: true}))
	}
	_, raddr := start(b, Options{RingDir: ringDir(b), Relay: &Relay{Upstreams: ups}})
	rc := dial(b, raddr, ClientOptions{})
	ctx, cancel := context.WithTimeout(rc.ctx(context.Background()), 10*time.Minute)
	defer cancel()
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	cpu0 := cpuTime()
	s, err := rc.c.SampleShm(ctx)
	if err != nil {
		b.Fatal(err)
	}
	req := &servepb.SampleRequest{ProtocolVersion: ProtocolVersion, Prefetch: 2}
	if err := s.Send(&servepb.ShmControl{Request: req, Ring: &servepb.ShmRequest{Slots: 6}}); err != nil {
		b.Fatal(err)
	}
	n := 0
	var encode, wait time.Duration
	for {
		m, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if m.Shm == nil {
			b.Fatalf("batch %d inline: %s", n, m.Note)
		}
		encode += time.Duration(m.Timing.GetEncodeNs())
		wait += time.Duration(m.Timing.GetSlotWaitNs())
		n++
		if err := s.Send(&servepb.ShmControl{Released: uint64(n)}); err != nil && err != io.EOF {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n != b.N {
		b.Fatalf("%d batches, want %d", n, b.N)
	}
	b.ReportMetric(float64(encode.Milliseconds())/float64(n), "copy-ms/batch")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Milliseconds())/float64(n), "cpu-ms/batch")
	}
}

// cpuTime is the process's CPU time so far (user and system): the
// relay's and the upstream's together, less sensitive than wall time to
// the other processes on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRelayDecode is the relay's own work on one received batch of
// ~60 MiB in gRPC's 16 KiB frame buffers, the network left out: "copy"
// is how it was (the frames copied into one reused buffer, decoded with
// the tensors left there, then copied into the slot), "pieces" how it is
// (decoded in the frames, copied from them into the slot).
//
//	go test -run '^$' -bench RelayDecode ./serve
func BenchmarkRelayDecode(b *testing.B) {
	msg, err := proto.Marshal(bigBatch(280_000))
	if err != nil {
		b.Fatal(err)
	}
	var frames mem.BufferSlice
	for lo := 0; lo < len(msg); lo += 16 << 10 {
		frames = append(frames, mem.SliceBuffer(msg[lo:min(lo+16<<10, len(msg))]))
	}
	slot := make([]byte, len(msg))
	var nums []protowire.Number
	for num := range batchTensorFields {
		nums = append(nums, num)
	}
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		buf := make([]byte, len(msg))
		for b.Loop() {
			frames.CopyTo(buf)
			m := &servepb.Batch{}
			if err := decodeBatchAliased(buf, m); err != nil {
				b.Fatal(err)
			}
			off := 0
			for _, num := range nums {
				if t := *batchTensorFields[num](m); t != nil {
					copyPieces(slot[off:off+len(t.Data)], [][]byte{t.Data})
					off += len(t.Data)
				}
			}
		}
	})
	b.Run("pieces", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		segs := make([][]byte, len(frames))
		for b.Loop() {
			for i, f := range frames {
				segs[i] = f.ReadOnlyData()
			}
			data, err := decodeBatchSegments(segs, &servepb.Batch{})
			if err != nil {
				b.Fatal(err)
			}
			in := &relayIn{data: data}
			off := 0
			for _, num := range nums {
				n := int(in.size(num))
				copyPieces(slot[off:off+n], data[num])
				off += n
			}
		}
	})
}
