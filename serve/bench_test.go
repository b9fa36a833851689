package serve

import (
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/serve/shmring"
)

var (
	benchOnce sync.Once
	benchDS   *dataset.Dataset
	benchErr  error
)

// benchData is the "small" preset (`strata gen --preset small`) at 100,000
// nodes with 100 features (products' width): a batch of 1,024 seeds with
// fanouts 15,10,5 has ~40k nodes, so its features are ~16 MB.
func benchData(b *testing.B) *dataset.Dataset {
	b.Helper()
	benchOnce.Do(func() {
		cfg, err := gen.Preset("small")
		if err != nil {
			benchErr = err
			return
		}
		cfg.NumNodes, cfg.FeatDim = 100_000, 100
		benchDS, benchErr = gen.Generate(cfg, nil)
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDS
}

// benchStream prepares a stream of batch 1,024, fanouts 15,10,5 over the
// training nodes.
func benchStream(b *testing.B, withX bool) *stream {
	b.Helper()
	s, err := New(Options{Dataset: benchData(b)})
	if err != nil {
		b.Fatal(err)
	}
	st, err := s.prepare(&servepb.SampleRequest{ProtocolVersion: ProtocolVersion, Split: servepb.Split_SPLIT_TRAIN,
		BatchSize: 1024, Fanouts: []int32{15, 10, 5}, Shuffle: true, Seed: 1, WithFeatures: withX, WithLabels: withX})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// legacyMessage is how the server built a batch's message before the
// tensors were written in place (kept here to compare): int32 copies of
// the edge rows, the features gathered into a fresh slice, then
// marshalled by gRPC's proto codec into another buffer.
func legacyMessage(st *stream, b *PyGBatch, i int, pos []int32) ([]byte, error) {
	inputID := make([]int64, len(pos))
	for k, p := range pos {
		inputID[k] = int64(p)
	}
	ne := len(b.Src)
	ei := make([]int32, 2*ne)
	copy(ei, b.Src)
	copy(ei[ne:], b.Dst)
	m := &servepb.Batch{
		Index: uint32(i), NumBatches: uint32(st.nb),
		NId:             Int32Tensor(b.NodeIDs, int64(len(b.NodeIDs))),
		EdgeIndex:       Int32Tensor(ei, 2, int64(ne)),
		NumSampledNodes: b.NumSampledNodes, NumSampledEdges: b.NumSampledEdges,
		BatchSize: uint32(b.BatchSize), InputId: Int64Tensor(inputID),
	}
	if st.withX {
		m.X = gatherRows(st.s.ds.Features, st.s.ds.FeatDim, b.NodeIDs)
	}
	if st.withY {
		m.Y = gatherLabels(st.s.ds.Labels, b.NodeIDs)
	}
	return proto.Marshal(m)
}

// BenchmarkBatchMessage is the server's work for one batch after
// sampling: encoding its message with the features and labels of its
// ~40k nodes (~16 MB), the way the server did before (legacy: gather
// into a new slice, then marshal) and does now (wire: the message's
// bytes written in place in a reused buffer; ring: into a shared-memory
// ring slot, the int64 IDs PyG wants). Sampling is done once, outside
// the timing; Sample adds it for scale.
//
//	go test -run '^$' -bench BatchMessage -benchmem ./serve
func BenchmarkBatchMessage(b *testing.B) {
	st := benchStream(b, true)
	r := NewRelabeler(st.s.n)
	pb, pos, err := st.sample(r, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("batch 0: %d nodes, %d edges, %d features", len(pb.NodeIDs), len(pb.Src), st.s.ds.FeatDim)
	b.Run("sample", func(b *testing.B) {
		for i := range b.N {
			if _, _, err := st.sample(r, i%len(st.jobs)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("legacy", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			w, err := legacyMessage(st, pb, 0, pos)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(w)))
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			m, size, err := st.encodeWire(pb, 0, pos, nil, "", 1<<30, batchTiming{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			m.free() // as gRPC does once it has written the message
		}
	})
	b.Run("ring", func(b *testing.B) {
		var sz slotWriter
		st.putTensors(&sz, pb, pos, true, false)
		used, err := shmring.Place(sz.specs)
		if err != nil {
			b.Fatal(err)
		}
		slot := make([]byte, slotBytesFor(used))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := writeSlot(slot, uint64(i), used, sz.specs, func(w tensorDst) { st.putTensors(w, pb, pos, true, false) }); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(used)
		}
	})
}
