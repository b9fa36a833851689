package serve

import (
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

// roundBF16 rounds every bit pattern as bf16 does (ties, carries into
// the exponent, infinities, NaNs of either sign), whatever the length.
func TestRoundBF16MatchesBF16(t *testing.T) {
	special := []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0xff7fffff, 0x7f800000,
		0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xffffffff, 0x7fffffff, 0x0000ffff, 0x00008000, 0x3fffffff}
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 0, 4*len(special)*len(special)+1001)
	for _, a := range special {
		for _, b := range special {
			src = append(src, math.Float32frombits(a), math.Float32frombits(b))
		}
	}
	for range 1001 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	for _, n := range []int{0, 1, len(src) - 1, len(src)} {
		got := make([]uint16, n)
		roundBF16(got, src[:n])
		for i, f := range src[:n] {
			if want := bf16(f); got[i] != want {
				t.Fatalf("n %d: element %d (%#x) rounded to %#x, bf16 gives %#x", n, i, math.Float32bits(f), got[i], want)
			}
		}
	}
}

// The rounded copy of the features (built once) and rounding each batch's
// rows send the same bytes.
func TestSampleBFloat16TableOrNot(t *testing.T) {
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 64, Fanouts: []int32{4, 3},
		Shuffle: true, Seed: 3, Epoch: 1, WithFeatures: true, WithLabels: true, Workers: 2,
		FeatureDtype: servepb.DType_DTYPE_BFLOAT16}
	var got [2][]*servepb.Batch
	for k, budget := range []int64{0, -1} {
		s, addr := start(t, Options{BF16TableBytes: budget})
		c := dial(t, addr, ClientOptions{})
		got[k] = collect(t, c, proto.Clone(req).(*servepb.SampleRequest))
		if kept := s.bf16.rows != nil; kept != (budget == 0) {
			t.Fatalf("budget %d: table kept %v", budget, kept)
		}
	}
	if len(got[0]) < 3 || len(got[0]) != len(got[1]) {
		t.Fatalf("%d and %d batches", len(got[0]), len(got[1]))
	}
	for i := range got[0] {
		if !proto.Equal(got[0][i].X, got[1][i].X) || got[0][i].X.Dtype != servepb.DType_DTYPE_BFLOAT16 {
			t.Fatalf("batch %d: x differs between the table and per-batch rounding", i)
		}
	}
}

// BenchmarkGatherRows is the feature gather of one batch (40k rows of
// 100 features) on one goroutine: float32 rows copied, rows rounded to
// bfloat16 (as every batch did before the table), and rows of the rounded
// table copied.
//
//	go test -run '^$' -bench GatherRows ./serve
func BenchmarkGatherRows(b *testing.B) {
	const n, dim, rows = 100_000, 100, 40_000
	x := make([]float32, n*dim)
	for i := range x {
		x[i] = float32(i%977) * 0.37
	}
	ids := make([]graph.NodeID, rows)
	for i := range ids {
		ids[i] = graph.NodeID((i * 7919) % n)
	}
	b.Run("float32", func(b *testing.B) {
		dst := make([]byte, 4*rows*dim)
		b.SetBytes(int64(len(dst)))
		for range b.N {
			gatherRowsInto(dst, x, dim, ids)
		}
	})
	dst := make([]byte, 2*rows*dim)
	b.Run("bfloat16-round", func(b *testing.B) {
		b.SetBytes(int64(len(dst)))
		for range b.N {
			gatherRowsBF16(dst, x, dim, ids)
		}
	})
	t := make([]uint16, len(x))
	roundBF16(t, x)
	b.Run("bfloat16-table", func(b *testing.B) {
		b.SetBytes(int64(len(dst)))
		for range b.N {
			gatherRowsU16(dst, t, dim, ids)
		}
	})
}
