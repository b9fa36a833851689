package serve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

func TestCheckTensor(t *testing.T) {
	ok := Int32Tensor([]int32{1, 2, 3, 4, 5, 6}, 2, 3)
	if n, err := CheckTensor(ok, "t"); err != nil || n != 6 {
		t.Fatalf("%d %v", n, err)
	}
	if !bytes.Equal(ok.Data[:8], []byte{1, 0, 0, 0, 2, 0, 0, 0}) {
		t.Fatalf("not little-endian: % x", ok.Data[:8])
	}
	for name, bad := range map[string]*servepb.Tensor{
		"nil":      nil,
		"dtype":    {Dtype: 99, Shape: []int64{1}, Data: make([]byte, 4)},
		"unset":    {Shape: []int64{1}, Data: make([]byte, 4)},
		"negative": {Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{-1}, Data: nil},
		"overflow": {Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{math.MaxInt64 / 4, 4}, Data: nil},
		"short":    {Dtype: servepb.DType_DTYPE_FLOAT32, Shape: []int64{2, 2}, Data: make([]byte, 15)},
		"long":     {Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{1}, Data: make([]byte, 9)},
		"rank":     {Dtype: servepb.DType_DTYPE_INT32, Shape: make([]int64, MaxRank+1), Data: nil},
	} {
		if _, err := CheckTensor(bad, "t"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A zero-size dimension makes an empty tensor, whatever the others.
	if n, err := CheckTensor(&servepb.Tensor{Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{0, math.MaxInt64}}, "t"); err != nil || n != 0 {
		t.Fatalf("empty: %d %v", n, err)
	}
}

func TestDecodeIDs(t *testing.T) {
	ids, err := DecodeIDs(Int32Tensor([]int32{4, 0, 9}, 3), "ids", 10, 5)
	if err != nil || !slices.Equal(ids, []graph.NodeID{4, 0, 9}) {
		t.Fatalf("%v %v", ids, err)
	}
	ids, err = DecodeIDs(Int64Tensor([]int64{7, 1}), "ids", 10, 5)
	if err != nil || !slices.Equal(ids, []graph.NodeID{7, 1}) {
		t.Fatalf("%v %v", ids, err)
	}
	var re *RequestError
	if _, err := DecodeIDs(Int64Tensor([]int64{1, 1 << 40}), "ids", 10, 5); !errors.As(err, &re) || re.Pos != 1 {
		t.Fatalf("out of range: %v", err)
	}
	if _, err := DecodeIDs(Int32Tensor([]int32{1, -3}, 2), "ids", 10, 5); !errors.As(err, &re) || re.Pos != 1 {
		t.Fatalf("negative: %v", err)
	}
	if _, err := DecodeIDs(Int32Tensor(make([]int32, 6), 6), "ids", 10, 5); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too many: %v", err)
	}
	if _, err := DecodeIDs(Int32Tensor(make([]int32, 4), 2, 2), "ids", 10, 5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("2-D: %v", err)
	}
	if _, err := DecodeIDs(gatherRows([]float32{1}, 1, []graph.NodeID{0}), "ids", 10, 5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("float: %v", err)
	}
}

func TestGather(t *testing.T) {
	x := []float32{0, 1, 10, 11, 20, 21}
	g := gatherRows(x, 2, []graph.NodeID{2, 0})
	if !slices.Equal(g.Shape, []int64{2, 2}) {
		t.Fatal(g.Shape)
	}
	var got []float32
	for i := 0; i < len(g.Data); i += 4 {
		got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(g.Data[i:])))
	}
	if !slices.Equal(got, []float32{20, 21, 0, 1}) {
		t.Fatal(got)
	}
	y := gatherLabels([]int32{5, -1, 7}, []graph.NodeID{1, 2})
	if !bytes.Equal(y.Data, []byte{0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0}) {
		t.Fatalf("% x", y.Data)
	}
}

// FuzzDecodeTensor feeds arbitrary bytes as a wire Tensor to the
// decoders: they never panic, never accept a tensor whose data does not
// match its shape, and what they accept reads back as encoded.
func FuzzDecodeTensor(f *testing.F) {
	for _, t := range []*servepb.Tensor{
		Int32Tensor([]int32{1, 2, 3}, 3), Int64Tensor([]int64{5, 0}), Int32Tensor(make([]int32, 4), 2, 2),
		gatherRows([]float32{1, 2}, 2, []graph.NodeID{0}),
		{Dtype: servepb.DType_DTYPE_INT64, Shape: []int64{1 << 62, 4}},
		{Dtype: servepb.DType_DTYPE_INT32, Shape: []int64{-2}},
	} {
		b, err := proto.Marshal(t)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m servepb.Tensor
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		n, err := CheckTensor(&m, "t")
		if err != nil {
			return
		}
		if int64(len(m.Data)) != n*itemSize(m.Dtype) {
			t.Fatalf("accepted %d bytes for %d elements of %s", len(m.Data), n, m.Dtype)
		}
		ids, err := DecodeIDs(&m, "ids", 1000, 1<<20)
		if err != nil {
			return
		}
		var again *servepb.Tensor
		if m.Dtype == servepb.DType_DTYPE_INT32 {
			again = Int32Tensor(ids, int64(len(ids)))
		} else {
			w := make([]int64, len(ids))
			for i, v := range ids {
				w[i] = int64(v)
			}
			again = Int64Tensor(w)
		}
		if !bytes.Equal(again.Data, m.Data) {
			t.Fatalf("IDs %v do not encode back to the input", ids)
		}
	})
}
