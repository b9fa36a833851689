package cache

import "github.com/strata-gnn/strata/tensor/backend"

// ValueBytes is the bytes a cached feature value takes at precision p:
// 2 at BF16, whose stores hold bfloat16 rows (twice the rows in a
// budget, half the bytes per gathered row), else 4. Rows leave a store
// widened to float32: loads return, and peers exchange, float32 rows.
func ValueBytes(p backend.Precision) int64 {
	if p == backend.BF16 {
		return 2
	}
	return 4
}
