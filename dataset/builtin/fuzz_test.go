package builtin

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
)

func seedPayloads(f *testing.F) [][]byte {
	var out [][]byte
	for _, d := range []*dataset.Dataset{
		{Name: "a", Graph: &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 1, 2}, Indices: []int32{1, 0}},
			FeatDim: 3, Features: []float32{1, 0, 1, 0, 1, 0}, NumClasses: 2, Labels: []int32{0, 1},
			Train: []int32{0}, Val: []int32{1}, Test: []int32{}},
		{Name: "b", Directed: true, Graph: &graph.CSR{NumRows: 2, NumCols: 2, Indptr: []int64{0, 2, 2}, Indices: []int32{0, 1}},
			FeatDim: 1, Features: []float32{0.5, 2}},
	} {
		b, err := Encode(d)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzDecode runs arbitrary bytes through the full decoder (gzip, CRC,
// payload), plus the real Cora asset as a seed.
func FuzzDecode(f *testing.F) {
	f.Add(coraAsset)
	for _, b := range seedPayloads(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := Decode(b); err == nil {
			if err := dataset.Validate(d); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzDecodePayload skips gzip and the CRC so the fuzzer reaches the
// payload decoder itself.
func FuzzDecodePayload(f *testing.F) {
	for _, b := range seedPayloads(f) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			f.Fatal(err)
		}
		var p bytes.Buffer
		p.ReadFrom(zr)
		f.Add(p.Bytes()[:p.Len()-4])
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		d, err := decodePayload(p)
		if err != nil {
			return
		}
		if err := dataset.Validate(d); err != nil {
			t.Fatal(err)
		}
		// Accepted payloads re-encode to an equivalent dataset.
		b, err := Encode(d)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
