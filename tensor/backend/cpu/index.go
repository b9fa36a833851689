package cpu

import (
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// GatherRows copies dst[i,:] = x[idx[i],:].
func (b *Backend) GatherRows(dst, x, idx backend.Buffer, xrows, cols int) error {
	const op = "GatherRows"
	if isBF16(dst) {
		return b.gatherBF16(dst, x, idx, xrows, cols, 0, 0)
	}
	xn, err := backend.Dims(op, xrows, cols)
	if err != nil {
		return err
	}
	iv, err := i32Any(op, "idx", idx)
	if err != nil {
		return err
	}
	dn, err := backend.Dims(op, len(iv), cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, dn)
	if err != nil {
		return err
	}
	if x != nil && x.DType() == backend.BFloat16 {
		xb, err := asBuf(op, "x", x, backend.BFloat16, xn)
		if err != nil {
			return err
		}
		if err := checkIdx(op, "idx", iv, xrows); err != nil {
			return err
		}
		parFor(len(iv), rowGrain(cols), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				j := int(iv[i])
				backend.FromBF16(d[i*cols:(i+1)*cols], xb.u16[j*cols:(j+1)*cols])
			}
		})
		return nil
	}
	xv, err := f32(op, "x", x, xn)
	if err != nil {
		return err
	}
	if err := checkIdx(op, "idx", iv, xrows); err != nil {
		return err
	}
	parFor(len(iv), rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			j := int(iv[i])
			copy(d[i*cols:(i+1)*cols], xv[j*cols:(j+1)*cols])
		}
	})
	return nil
}

// ScatterAddRows accumulates dst[idx[i],:] += src[i,:]. The indices are
// bucketed by destination with a stable counting sort, so each destination
// row is summed by one goroutine in the original order of i.
func (b *Backend) ScatterAddRows(dst, src, idx backend.Buffer, dstRows, cols int) error {
	const op = "ScatterAddRows"
	dn, err := backend.Dims(op, dstRows, cols)
	if err != nil {
		return err
	}
	iv, err := i32Any(op, "idx", idx)
	if err != nil {
		return err
	}
	sn, err := backend.Dims(op, len(iv), cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, dn)
	if err != nil {
		return err
	}
	sv, err := f32(op, "src", src, sn)
	if err != nil {
		return err
	}
	if err := checkIdx(op, "idx", iv, dstRows); err != nil {
		return err
	}
	if len(iv) == 0 || cols == 0 {
		return nil
	}
	if len(iv)*cols <= 2*grainElem || len(iv) > math.MaxInt32 {
		for i, j := range iv {
			addTo(d[int(j)*cols:(int(j)+1)*cols], sv[i*cols:(i+1)*cols])
		}
		return nil
	}
	ptr, order := bucket(iv, dstRows)
	parFor(dstRows, rowGrain(cols*max(1, len(iv)/max(dstRows, 1))), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr := d[r*cols : (r+1)*cols]
			for _, i := range order[ptr[r]:ptr[r+1]] {
				addTo(dr, sv[int(i)*cols:(int(i)+1)*cols])
			}
		}
	})
	return nil
}

// bucket is a stable counting sort of positions by key: positions with key
// r are order[ptr[r]:ptr[r+1]], in increasing position order.
func bucket(keys []int32, n int) (ptr []int, order []int32) {
	ptr = make([]int, n+1)
	for _, k := range keys {
		ptr[k+1]++
	}
	for r := 0; r < n; r++ {
		ptr[r+1] += ptr[r]
	}
	order = make([]int32, len(keys))
	next := make([]int, n)
	copy(next, ptr[:n])
	for i, k := range keys {
		order[next[k]] = int32(i)
		next[k]++
	}
	return ptr, order
}
