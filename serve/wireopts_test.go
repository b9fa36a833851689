package serve

import (
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

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
