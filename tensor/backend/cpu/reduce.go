package cpu

import (
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// sumChunk is the fixed number of elements per partial sum in Sum.
const sumChunk = 1 << 14

// SumRows computes dst[c] = sum_r x[r,c]. Rows are summed in fixed blocks
// (in float64), and block sums are combined in block order.
func (b *Backend) SumRows(dst, x backend.Buffer, rows, cols int) error {
	const op = "SumRows"
	if isBF16(x) {
		return b.sumRowsBF16(dst, x, rows, cols)
	}
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, cols)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, n)
	if err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	block := max(256, sumChunk/cols) // rows per block: a function of cols only
	nb := (rows + block - 1) / block
	part := make([]float64, nb*cols)
	parFor(nb, 1, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			p := part[blk*cols : (blk+1)*cols]
			for r := blk * block; r < min((blk+1)*block, rows); r++ {
				for c, v := range xv[r*cols : (r+1)*cols] {
					p[c] += float64(v)
				}
			}
		}
	})
	parFor(cols, grainElem/max(nb, 1), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			var s float64
			for blk := 0; blk < nb; blk++ {
				s += part[blk*cols+c]
			}
			d[c] = float32(s)
		}
	})
	return nil
}

// Sum returns the sum of all elements of x in float64, over fixed chunks
// combined in order.
func (b *Backend) Sum(x backend.Buffer) (float64, error) {
	xv, err := f32Any("Sum", "x", x)
	if err != nil {
		return 0, err
	}
	parts := chunkSums(len(xv), sumChunk, func(lo, hi int) float64 {
		var s float64
		for _, v := range xv[lo:hi] {
			s += float64(v)
		}
		return s
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s, nil
}

// ArgmaxRows writes each row's first largest column into dst (int32).
func (b *Backend) ArgmaxRows(dst, x backend.Buffer, rows, cols int) error {
	const op = "ArgmaxRows"
	n, err := backend.ArgmaxShape(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := i32(op, "dst", dst, rows)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, n)
	if err != nil {
		return err
	}
	parFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := xv[r*cols : (r+1)*cols]
			best, bi := row[0], 0
			for c, v := range row {
				if v > best {
					best, bi = v, c
				}
			}
			d[r] = int32(bi)
		}
	})
	return nil
}

// LogSoftmax computes dst = x - max - log(sum exp(x - max)) per row.
func (b *Backend) LogSoftmax(dst, x backend.Buffer, rows, cols int) error {
	const op = "LogSoftmax"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, n)
	if err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	parFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dr := xv[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			m := xr[0]
			for _, v := range xr {
				m = max(m, v)
			}
			var s float64
			for _, v := range xr {
				s += math.Exp(float64(v - m))
			}
			lse := float64(m) + math.Log(s)
			for c, v := range xr {
				dr[c] = float32(float64(v) - lse)
			}
		}
	})
	return nil
}

// LogSoftmaxBackward computes dx = dy - exp(y) * rowsum(dy).
func (b *Backend) LogSoftmaxBackward(dx, y, dy backend.Buffer, rows, cols int) error {
	const op = "LogSoftmaxBackward"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dx", dx, n)
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, n)
	if err != nil {
		return err
	}
	g, err := f32(op, "dy", dy, n)
	if err != nil {
		return err
	}
	parFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, gr, dr := yv[r*cols:(r+1)*cols], g[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			var s float64
			for _, v := range gr {
				s += float64(v)
			}
			for c := range dr {
				dr[c] = float32(float64(gr[c]) - math.Exp(float64(yr[c]))*s)
			}
		}
	})
	return nil
}

// nllArgs validates the NLL arguments and returns rows and labels.
func nllArgs(op string, rows, labels backend.Buffer, nrows, cols int) ([]int32, []int32, error) {
	if _, err := backend.Dims(op, nrows, cols); err != nil {
		return nil, nil, err
	}
	rv, err := i32Any(op, "rows", rows)
	if err != nil {
		return nil, nil, err
	}
	lv, err := i32(op, "labels", labels, len(rv))
	if err != nil {
		return nil, nil, err
	}
	if err := checkIdx(op, "rows", rv, nrows); err != nil {
		return nil, nil, err
	}
	if err := checkIdx(op, "labels", lv, cols); err != nil {
		return nil, nil, err
	}
	return rv, lv, nil
}

// NLLLoss returns -(1/len(rows)) * sum_i logp[rows[i], labels[i]], summed
// in float64 in index order (0 when rows is empty).
func (b *Backend) NLLLoss(logp, rows, labels backend.Buffer, nrows, cols int) (float64, error) {
	const op = "NLLLoss"
	rv, lv, err := nllArgs(op, rows, labels, nrows, cols)
	if err != nil {
		return 0, err
	}
	lp, err := f32(op, "logp", logp, nrows*cols)
	if err != nil {
		return 0, err
	}
	if len(rv) == 0 {
		return 0, nil
	}
	var s float64
	for i, r := range rv {
		s += float64(lp[int(r)*cols+int(lv[i])])
	}
	return -s / float64(len(rv)), nil
}

// NLLLossBackward writes dlogp = 0 except -scale/len(rows) at each
// (rows[i], labels[i]) (accumulating over repeated pairs).
func (b *Backend) NLLLossBackward(dlogp, rows, labels backend.Buffer, nrows, cols int, scale float32) error {
	const op = "NLLLossBackward"
	rv, lv, err := nllArgs(op, rows, labels, nrows, cols)
	if err != nil {
		return err
	}
	d, err := f32(op, "dlogp", dlogp, nrows*cols)
	if err != nil {
		return err
	}
	parFor(len(d), grainElem, func(lo, hi int) { clear(d[lo:hi]) })
	if len(rv) == 0 {
		return nil
	}
	g := -scale / float32(len(rv))
	for i, r := range rv {
		d[int(r)*cols+int(lv[i])] += g
	}
	return nil
}
