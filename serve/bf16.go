package serve

import (
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
)

// bfloat16 features (feature_dtype BFLOAT16). Rounding a float32 is a
// handful of integer operations per element, several times the cost of
// copying it: for products' 100 features a batch of 260k nodes is 26
// million roundings, which made the encode of a bfloat16 batch ten times
// that of a float32 one. The server therefore rounds the whole feature
// matrix once, the first time a stream asks for bfloat16, and then
// gathers rows of the rounded copy (a plain copy of 2*dim bytes a row),
// unless the copy would take more than Options.BF16TableBytes: then each
// batch rounds its own rows.

// DefaultBF16TableBytes bounds the rounded copy of the features a server
// keeps for bfloat16 streams (half the features' size).
const DefaultBF16TableBytes = 8 << 30

// bf16Table is the features rounded to bfloat16, built once on demand.
type bf16Table struct {
	once sync.Once
	rows []uint16 // nil: not kept (no features, or over the budget)
}

// bf16Rows returns the rounded feature matrix, building it on first use;
// nil when it is not kept.
func (s *Server) bf16Rows() []uint16 {
	s.bf16.once.Do(func() {
		x := s.ds.Features
		if len(x) == 0 || s.opt.BF16TableBytes < 0 || int64(len(x))*2 > s.opt.BF16TableBytes {
			return
		}
		t := make([]uint16, len(x))
		dim := max(s.ds.FeatDim, 1)
		inParallel(len(x)/dim, 6*dim, func(lo, hi int) {
			roundBF16(t[lo*dim:hi*dim], x[lo*dim:hi*dim])
		})
		s.bf16.rows = t
	})
	return s.bf16.rows
}

// roundBF16 writes src rounded to bfloat16 (bf16) into dst (len(src)
// elements). (Rounding two lanes of a 64-bit word at once measured no
// faster: the table is what saves the time.)
func roundBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for j, f := range src {
		dst[j] = bf16(f)
	}
}

// gatherRowsU16 copies rows ids of the row-major [*, dim] bfloat16 matrix
// t into dst (little-endian, len(ids)*dim elements).
func gatherRowsU16(dst []byte, t []uint16, dim int, ids []graph.NodeID) {
	out := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), dim*len(ids))
	for i, v := range ids {
		copy(out[i*dim:(i+1)*dim], t[int(v)*dim:(int(v)+1)*dim])
	}
}
