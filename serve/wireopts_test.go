package serve

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {0, 0}, {float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // a tie, to even (down)
		{math.Float32frombits(0x3f818000), 0x3f82}, // a tie, to even (up)
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{math.MaxFloat32, 0x7f80},                  // rounds to +Inf, as IEEE
	} {
		if got := bf16(c.f); got != c.want {
			t.Errorf("bf16(%g = %#x) = %#x, want %#x", c.f, math.Float32bits(c.f), got, c.want)
		}
	}
	if got := bf16(float32(math.NaN())); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("bf16(NaN) = %#x, not a NaN", got)
	}
}

// feature_dtype BFLOAT16 sends the same batches with x rounded to
// bfloat16; everything else is byte for byte the float32 stream's.
func TestSampleFeatureBFloat16(t *testing.T) {
	ds := tiny(t)
	_, addr := start(t, Options{})
	c := dial(t, addr, ClientOptions{})
	req := &servepb.SampleRequest{Split: servepb.Split_SPLIT_TRAIN, BatchSize: 64, Fanouts: []int32{4, 3},
		Shuffle: true, Seed: 9, Epoch: 2, WithFeatures: true, WithLabels: true, Workers: 2}
	want := collect(t, c, proto.Clone(req).(*servepb.SampleRequest))
	req.FeatureDtype = servepb.DType_DTYPE_BFLOAT16
	got := collect(t, c, req)
	if len(got) != len(want) || len(got) < 3 {
		t.Fatalf("%d batches in bfloat16, %d in float32", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !proto.Equal(g.NId, w.NId) || !proto.Equal(g.EdgeIndex, w.EdgeIndex) || !proto.Equal(g.Y, w.Y) || !proto.Equal(g.InputId, w.InputId) {
			t.Fatalf("batch %d: IDs, edges or labels differ with bfloat16 features", i)
		}
		if g.X.Dtype != servepb.DType_DTYPE_BFLOAT16 || !slices64Equal(g.X.Shape, w.X.Shape) || len(g.X.Data)*2 != len(w.X.Data) {
			t.Fatalf("batch %d: x %v %v (%d bytes), float32 x %v", i, g.X.Dtype, g.X.Shape, len(g.X.Data), w.X.Shape)
		}
		for k, f := range float32s(t, w.X) {
			h := binary.LittleEndian.Uint16(g.X.Data[2*k:])
			back := math.Float32frombits(uint32(h) << 16)
			if h != bf16(f) || math.Abs(float64(back-f)) > math.Abs(float64(f))/256 {
				t.Fatalf("batch %d: x[%d] = %g sent as %#x (%g)", i, k, f, h, back)
			}
		}
		if g.Timing == nil || g.Timing.SampleNs == 0 || g.Timing.EncodeNs == 0 {
			t.Fatalf("batch %d: timing %v", i, g.Timing)
		}
	}
	info, err := c.Info(t.Context())
	if err != nil || !containsString(info.Capabilities, CapBFloat16) {
		t.Fatalf("capabilities %v (%v), want %q", info.GetCapabilities(), err, CapBFloat16)
	}
	// Other feature types are refused by name.
	req.FeatureDtype = servepb.DType_DTYPE_INT64
	st, err := c.Sample(t.Context(), req)
	if err == nil {
		_, err = st.Recv()
	}
	if code(err) != codes.InvalidArgument {
		t.Fatalf("feature_dtype INT64: %v, want InvalidArgument", err)
	}
	_ = ds
}

func slices64Equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func containsString(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

// inParallel covers [0, n) exactly once, in order within each chunk,
// whatever the split.
func TestInParallel(t *testing.T) {
	for _, c := range []struct{ n, row int }{{0, 400}, {1, 400}, {10, 1}, {100_000, 400}, {123_457, 400}, {5, 1 << 24}} {
		seen := make([]int32, c.n)
		inParallel(c.n, c.row, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("n %d, row %d: index %d covered %d times", c.n, c.row, i, s)
			}
		}
	}
}

// The parallel feature gather of a large batch writes what one row after
// another does, in float32 and in bfloat16.
func TestGatherFeaturesParallel(t *testing.T) {
	const nodes, dim, n = 50_000, 32, 120_000 // 15 MB of float32 rows: several chunks
	x := make([]float32, nodes*dim)
	for i := range x {
		x[i] = float32(i%9973) * 0.37
	}
	ids := make([]graph.NodeID, n)
	for i := range ids {
		ids[i] = graph.NodeID((i * 7919) % nodes)
	}
	want := make([]byte, 4*n*dim)
	gatherRowsInto(want, x, dim, ids)
	got := make([]byte, 4*n*dim)
	gatherFeatures(got, x, dim, ids, false)
	if !bytes.Equal(got, want) {
		t.Fatal("parallel float32 gather differs")
	}
	wantH := make([]byte, 2*n*dim)
	gatherRowsBF16(wantH, x, dim, ids)
	gotH := make([]byte, 2*n*dim)
	gatherFeatures(gotH, x, dim, ids, true)
	if !bytes.Equal(gotH, wantH) {
		t.Fatal("parallel bfloat16 gather differs")
	}
	for k := range 1000 {
		i, j := k*97%n, k%dim
		if h := binary.LittleEndian.Uint16(gotH[2*(i*dim+j):]); h != bf16(x[int(ids[i])*dim+j]) {
			t.Fatalf("row %d col %d: %#x", i, j, h)
		}
	}
}
