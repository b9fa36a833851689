package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/strata-gnn/strata/internal/cublas"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C (row-major) with cuBLAS.
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) error {
	const op = "Gemm"
	mk, kn, mn, err := backend.GemmShape(op, m, n, k)
	if err != nil {
		return err
	}
	av, err := d.float(op, "a", a, mk)
	if err != nil {
		return err
	}
	bv, err := d.float(op, "b", b, kn)
	if err != nil {
		return err
	}
	cv, err := d.float(op, "c", c, mn)
	if err != nil {
		return err
	}
	half := av.dt == backend.BFloat16
	if bv.dt != av.dt || (cv.dt == backend.BFloat16 && !half) {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("a %s, b %s, c %s: want a and b of one dtype, and a bfloat16 c only with bfloat16 a and b", av.dt, bv.dt, cv.dt)}
	}
	if m == 0 || n == 0 {
		return nil
	}
	if m > math.MaxInt32 || n > math.MaxInt32 || k > math.MaxInt32 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("m=%d n=%d k=%d: cuBLAS needs each below 2^31", m, n, k)}
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	if k == 0 || alpha == 0 {
		// BLAS semantics: beta == 0 sets C to zero without reading it.
		if cv.dt == backend.BFloat16 {
			return d.launchN("scale_bf16", int64(mn), uint64(cv.ptr), cu.F32(beta), cu.I64(int64(mn)))
		}
		return d.launchN("scale_f32", int64(mn), uint64(cv.ptr), cu.F32(beta), cu.I64(int64(mn)))
	}
	if half {
		// bfloat16 operands (activations): their products are exact in
		// float32, summed in float32 on the tensor cores.
		ct := cublas.R32F
		if cv.dt == backend.BFloat16 {
			ct = cublas.R16BF
		}
		return d.timed(d.gemmName("gemm bf16x", transA, transB, m, n, k), func() error {
			if done, err := d.pinned(cublas.Compute32F, cublas.R16BF, ct, transA, transB, m, n, k, alpha, av.ptr, bv.ptr, beta, cv.ptr); done {
				return err
			}
			return d.blas.GemmExTyped(cublas.Compute32F, cublas.R16BF, ct, transA, transB, m, n, k, alpha, uintptr(av.ptr), uintptr(bv.ptr), beta, uintptr(cv.ptr))
		})
	}
	if d.prec == backend.BF16 {
		return d.timed(d.gemmName("gemm bf16", transA, transB, m, n, k), func() error {
			if done, err := d.pinned(cublas.Compute32FFast16BF, cublas.R32F, cublas.R32F, transA, transB, m, n, k, alpha, av.ptr, bv.ptr, beta, cv.ptr); done {
				return err
			}
			return d.blas.GemmEx(cublas.Compute32FFast16BF, transA, transB, m, n, k, alpha, uintptr(av.ptr), uintptr(bv.ptr), beta, uintptr(cv.ptr))
		})
	}
	// FP32: cublasSgemm in CUBLAS_DEFAULT_MATH is CUBLAS_COMPUTE_32F; TF32:
	// in CUBLAS_TF32_TENSOR_OP_MATH (SetTF32) it is
	// CUBLAS_COMPUTE_32F_FAST_TF32.
	ct := cublas.Compute32F
	if d.prec == backend.TF32 {
		ct = cublas.Compute32FFastTF32
	}
	return d.timed(d.gemmName("sgemm", transA, transB, m, n, k), func() error {
		if done, err := d.pinned(ct, cublas.R32F, cublas.R32F, transA, transB, m, n, k, alpha, av.ptr, bv.ptr, beta, cv.ptr); done {
			return err
		}
		return d.blas.Gemm(transA, transB, m, n, k, alpha, uintptr(av.ptr), uintptr(bv.ptr), beta, uintptr(cv.ptr))
	})
}

// pinned runs a product through the pinned cuBLASLt algorithms (d.lt) on
// the device's stream and the cuBLAS handle's workspace. done is false
// when the caller must call cuBLAS instead: the pinned path is off, or
// cuBLASLt has no algorithm for the product.
func (d *Device) pinned(ct cublas.ComputeType, ab, c cublas.DataType, transA, transB bool, m, n, k int, alpha float32, a, b cu.DevPtr, beta float32, cp cu.DevPtr) (done bool, err error) {
	if d.lt == nil {
		return false, nil
	}
	r := &d.ltReq
	*r = cublas.GemmRequest{Compute: ct, AB: ab, C: c, TransA: transA, TransB: transB, M: m, N: n, K: k,
		Alpha: alpha, Beta: beta, A: uintptr(a), B: uintptr(b), CPtr: uintptr(cp),
		Stream: uintptr(d.stream), Workspace: uintptr(d.blasWS), WorkspaceBytes: cublas.WorkspaceBytes}
	if err = d.lt.Gemm(r); errors.Is(err, cublas.ErrNoAlgorithm) {
		return false, nil
	}
	return true, err
}

// gemmName names a product in the op profile by its transposes and
// shape, m and k rounded to powers of two (a sampled batch's row counts
// vary): "sgemm NT m2^17 n256 k2^7". Plain kind when not profiling.
func (d *Device) gemmName(kind string, transA, transB bool, m, n, k int) string {
	if !d.prof.on {
		return kind
	}
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s %s%s m2^%d n%d k2^%d", kind, t(transA), t(transB), bits.Len(uint(m))-1, n, bits.Len(uint(k))-1)
}

// Axpby computes dst = alpha*x + beta*y.
func (d *Device) Axpby(dst backend.Buffer, alpha float32, x backend.Buffer, beta float32, y backend.Buffer) error {
	const op = "Axpby"
	if dst == nil {
		return &backend.ShapeError{Op: op, Msg: "dst is nil"}
	}
	dv, err := d.float(op, "dst", dst, dst.Len())
	if err != nil {
		return err
	}
	xv, err := d.asBuf(op, "x", x, dv.dt, dv.n)
	if err != nil {
		return err
	}
	yv, err := d.asBuf(op, "y", y, dv.dt, dv.n)
	if err != nil {
		return err
	}
	kernel, items := "axpby_f32", int64(dv.n)
	if dv.dt == backend.BFloat16 {
		kernel = "axpby_bf16"
		if wide8(dv.n, uint64(dv.ptr), uint64(xv.ptr), uint64(yv.ptr)) {
			kernel, items = "axpby_bf16x8", items/8 // 8 values a thread, the same bits
		}
	}
	return d.run(func() error {
		return d.launchN(kernel, items, uint64(dv.ptr), cu.F32(alpha), uint64(xv.ptr), cu.F32(beta), uint64(yv.ptr), cu.I64(items))
	})
}

// run executes fn with the device entered.
func (d *Device) run(fn func() error) error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return fn()
}

// Mul computes dst = x * y elementwise.
func (d *Device) Mul(dst, x, y backend.Buffer) error {
	const op = "Mul"
	dv, err := d.f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, dv.n)
	if err != nil {
		return err
	}
	yv, err := d.f32(op, "y", y, dv.n)
	if err != nil {
		return err
	}
	return d.run(func() error {
		return d.launchN("mul_f32", int64(dv.n), uint64(dv.ptr), uint64(xv.ptr), uint64(yv.ptr), cu.I64(int64(dv.n)))
	})
}

// AddRowVector computes dst[r,c] = x[r,c] + v[c].
func (d *Device) AddRowVector(dst, x, v backend.Buffer, rows, cols int) error {
	const op = "AddRowVector"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, n)
	if err != nil {
		return err
	}
	vv, err := d.f32(op, "v", v, cols)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchN("add_row_vector", int64(n), uint64(dv.ptr), uint64(xv.ptr), uint64(vv.ptr), cu.I64(int64(n)), cu.I64(int64(cols)))
	})
}

func checkUnary(op string, u backend.UnaryOp) error {
	switch u {
	case backend.ReLU, backend.LeakyReLU, backend.ELU, backend.Exp, backend.Identity:
		return nil
	}
	return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("unknown unary op %v", u)}
}

// Unary computes dst = op(x).
func (d *Device) Unary(u backend.UnaryOp, alpha float32, dst, x backend.Buffer) error {
	const op = "Unary"
	if err := checkUnary(op, u); err != nil {
		return err
	}
	dv, err := d.f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, dv.n)
	if err != nil {
		return err
	}
	return d.run(func() error {
		return d.launchN("unary_f32", int64(dv.n), cu.I32(int32(u)), cu.F32(alpha), uint64(dv.ptr), uint64(xv.ptr), cu.I64(int64(dv.n)))
	})
}

// UnaryBackward computes dx = dy * op'(x).
func (d *Device) UnaryBackward(u backend.UnaryOp, alpha float32, dx, x, y, dy backend.Buffer) error {
	const op = "UnaryBackward"
	if err := checkUnary(op, u); err != nil {
		return err
	}
	dv, err := d.f32Any(op, "dx", dx)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, dv.n)
	if err != nil {
		return err
	}
	yv, err := d.f32(op, "y", y, dv.n)
	if err != nil {
		return err
	}
	gv, err := d.f32(op, "dy", dy, dv.n)
	if err != nil {
		return err
	}
	return d.run(func() error {
		return d.launchN("unary_backward_f32", int64(dv.n), cu.I32(int32(u)), cu.F32(alpha), uint64(dv.ptr), uint64(xv.ptr), uint64(yv.ptr), uint64(gv.ptr), cu.I64(int64(dv.n)))
	})
}

// Dropout writes mask (1/(1-p) where rng.DropUniform(seed, i) >= p, else 0)
// and dst = x*mask: the same mask as the CPU back end, bit for bit.
func (d *Device) Dropout(dst, mask, x backend.Buffer, p float32, seed uint64) error {
	const op = "Dropout"
	keep, err := dropArgs(op, p)
	if err != nil {
		return err
	}
	dv, err := d.f32Any(op, "dst", dst)
	if err != nil {
		return err
	}
	mv, err := d.f32(op, "mask", mask, dv.n)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, dv.n)
	if err != nil {
		return err
	}
	return d.run(func() error {
		return d.launchN("dropout_f32", int64(dv.n), uint64(dv.ptr), uint64(mv.ptr), uint64(xv.ptr), cu.F32(p), cu.F32(keep), seed, cu.I64(int64(dv.n)))
	})
}

// AdamStep performs one Adam update in place (torch.optim.Adam with L2
// weight decay); bias corrections are computed in float64 on the host as
// in the CPU back end.
func (d *Device) AdamStep(param, grad, m, v backend.Buffer, lr, beta1, beta2, eps, wd float32, t int) error {
	const op = "AdamStep"
	if !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || t < 1 {
		return &backend.ShapeError{Op: op, Msg: fmt.Sprintf("beta1 %v, beta2 %v, t %d: want betas in [0,1) and t >= 1", beta1, beta2, t)}
	}
	pv, err := d.f32Any(op, "param", param)
	if err != nil {
		return err
	}
	gv, err := d.f32(op, "grad", grad, pv.n)
	if err != nil {
		return err
	}
	mv, err := d.f32(op, "m", m, pv.n)
	if err != nil {
		return err
	}
	vv, err := d.f32(op, "v", v, pv.n)
	if err != nil {
		return err
	}
	bc1 := 1 - math.Pow(float64(beta1), float64(t))
	bc2 := 1 - math.Pow(float64(beta2), float64(t))
	step := float32(float64(lr) / bc1)
	rbc2 := float32(1 / math.Sqrt(bc2))
	return d.run(func() error {
		return d.launchN("adam_step", int64(pv.n), uint64(pv.ptr), uint64(gv.ptr), uint64(mv.ptr), uint64(vv.ptr),
			cu.F32(step), cu.F32(rbc2), cu.F32(beta1), cu.F32(beta2), cu.F32(eps), cu.F32(wd), cu.I64(int64(pv.n)))
	})
}

// sumBlocks is the number of partial sums of Sum: a function of n only, so
// the reduction tree, and the result, never change between runs.
func sumBlocks(n int64) int64 { return max(1, min((n+1023)/1024, 1024)) }

// sumLocked queues a deterministic double-precision sum of the n floats at
// x into the double at out.
func (d *Device) sumLocked(x cu.DevPtr, n int64, out cu.DevPtr) error {
	nb := sumBlocks(n)
	part, err := d.allocLocked(backend.Int64, int(nb)) // nb doubles
	if err != nil {
		return err
	}
	defer d.freeLocked(part)
	if err := d.launchGrid("sum_partial", cu.D1(int(nb)), cu.D1(256), uint64(x), cu.I64(n), uint64(part.ptr)); err != nil {
		return err
	}
	return d.launchGrid("sum_final", cu.D1(1), cu.D1(256), uint64(part.ptr), cu.I32(int32(nb)), uint64(out))
}

// readF64 copies one double from the device and waits for it.
func (d *Device) readF64(p cu.DevPtr) (float64, error) {
	res := unsafe.Add(d.host, offResult)
	if err := cu.MemcpyDtoHAsync(res, p, 8, d.stream); err != nil {
		return 0, err
	}
	if err := d.stream.Synchronize(); err != nil {
		return 0, err
	}
	return *(*float64)(res), nil
}

// Sum returns the sum of all elements of x in float64 (a fixed reduction
// tree: deterministic).
func (d *Device) Sum(x backend.Buffer) (float64, error) {
	xv, err := d.f32Any("Sum", "x", x)
	if err != nil {
		return 0, err
	}
	if xv.n == 0 {
		return 0, nil
	}
	leave, err := d.enter()
	if err != nil {
		return 0, err
	}
	defer leave()
	out, err := d.allocLocked(backend.Int64, 1)
	if err != nil {
		return 0, err
	}
	defer d.freeLocked(out)
	if err := d.sumLocked(xv.ptr, int64(xv.n), out.ptr); err != nil {
		return 0, err
	}
	return d.readF64(out.ptr)
}

// SumRows computes dst[c] = sum_r x[r,c]: rows are summed in fixed chunks
// in double, and chunk sums combined in chunk order.
func (d *Device) SumRows(dst, x backend.Buffer, rows, cols int) error {
	const op = "SumRows"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, cols)
	if err != nil {
		return err
	}
	xv, err := d.float(op, "x", x, n)
	if err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	partial := "sum_rows_partial"
	if xv.dt == backend.BFloat16 {
		partial = "sum_rows_partial_bf16"
	}
	chunk, nchunks, err := sumRowsChunks(op, rows, cols)
	if err != nil {
		return err
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	part, err := d.allocLocked(backend.Int64, nchunks*cols)
	if err != nil {
		return err
	}
	defer d.freeLocked(part)
	if rows == 0 {
		return d.launchN("fill_f32", int64(cols), uint64(dv.ptr), cu.F32(0), cu.I64(int64(cols)))
	}
	grid := cu.Dim3{X: uint32((cols + 31) / 32), Y: uint32(nchunks), Z: 1}
	if err := d.launchGrid(partial, grid, cu.Dim3{X: 32, Y: 8, Z: 1}, uint64(xv.ptr), cu.I64(int64(rows)), cu.I64(int64(cols)), cu.I64(int64(chunk)), uint64(part.ptr)); err != nil {
		return err
	}
	return d.launchWarps("sum_rows_final", int64(cols), uint64(part.ptr), cu.I64(int64(nchunks)), cu.I64(int64(cols)), uint64(dv.ptr))
}

// sumRowsChunks returns SumRows' split of rows into chunks (at most
// 4096: grid.y's limit is 65535), whose partial sums it keeps in double;
// BiasActDropoutBackward shares it so that its bias sums are SumRows'.
func sumRowsChunks(op string, rows, cols int) (chunk, nchunks int, err error) {
	chunk = max(64, (rows+4095)/4096)
	nchunks = max(1, (rows+chunk-1)/chunk)
	if int64(nchunks)*int64(cols) > maxElems {
		return 0, 0, &backend.ShapeError{Op: op, Msg: "shape too large"}
	}
	return chunk, nchunks, nil
}

// ArgmaxRows writes each row's first largest column into dst (int32).
func (d *Device) ArgmaxRows(dst, x backend.Buffer, rows, cols int) error {
	const op = "ArgmaxRows"
	n, err := backend.ArgmaxShape(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.i32(op, "dst", dst, rows)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, n)
	if err != nil {
		return err
	}
	return d.run(func() error {
		return d.launchWarps("argmax_rows", int64(rows), uint64(dv.ptr), uint64(xv.ptr), cu.I64(int64(rows)), cu.I64(int64(cols)))
	})
}

// LogSoftmax computes dst = x - max - log(sum exp(x - max)) per row.
func (d *Device) LogSoftmax(dst, x backend.Buffer, rows, cols int) error {
	const op = "LogSoftmax"
	n, err := backend.Dims(op, rows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, n)
	if err != nil {
		return err
	}
	xv, err := d.f32(op, "x", x, n)
	if err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchWarps("log_softmax", int64(rows), uint64(dv.ptr), uint64(xv.ptr), cu.I64(int64(rows)), cu.I64(int64(cols)))
	})
}

// LogSoftmaxBackward computes dx = dy - exp(y) * rowsum(dy).
func (d *Device) LogSoftmaxBackward(dx, y, dy backend.Buffer, rows, cols int) error {
	_, dv, yv, gv, err := d.backwardArgs("LogSoftmaxBackward", dx, y, dy, rows, cols)
	if err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	return d.run(func() error {
		return d.launchWarps("log_softmax_backward", int64(rows), uint64(dv.ptr), uint64(yv.ptr), uint64(gv.ptr), cu.I64(int64(rows)), cu.I64(int64(cols)))
	})
}

// backwardArgs checks the arguments of a backward op over a rows x cols
// output y (LogSoftmaxBackward, BiasActDropoutBackward): dx, y and dy
// float32 of n = rows x cols each.
func (d *Device) backwardArgs(op string, dx, y, dy backend.Buffer, rows, cols int) (n int, dxv, yv, gv *Buffer, err error) {
	if n, err = backend.Dims(op, rows, cols); err != nil {
		return 0, nil, nil, nil, err
	}
	if dxv, err = d.f32(op, "dx", dx, n); err != nil {
		return 0, nil, nil, nil, err
	}
	if yv, err = d.f32(op, "y", y, n); err != nil {
		return 0, nil, nil, nil, err
	}
	if gv, err = d.f32(op, "dy", dy, n); err != nil {
		return 0, nil, nil, nil, err
	}
	return n, dxv, yv, gv, nil
}

// nllArgs validates the NLL arguments.
func (d *Device) nllArgs(op string, rows, labels backend.Buffer, nrows, cols int) (*Buffer, *Buffer, error) {
	if _, err := backend.Dims(op, nrows, cols); err != nil {
		return nil, nil, err
	}
	rv, err := d.i32Any(op, "rows", rows)
	if err != nil {
		return nil, nil, err
	}
	lv, err := d.i32(op, "labels", labels, rv.n)
	if err != nil {
		return nil, nil, err
	}
	return rv, lv, nil
}

// NLLLoss returns -(1/len(rows)) * sum_i logp[rows[i], labels[i]]
// (synchronizes; index errors are reported by this call).
func (d *Device) NLLLoss(logp, rows, labels backend.Buffer, nrows, cols int) (float64, error) {
	const op = "NLLLoss"
	rv, lv, err := d.nllArgs(op, rows, labels, nrows, cols)
	if err != nil {
		return 0, err
	}
	lp, err := d.f32(op, "logp", logp, nrows*cols)
	if err != nil {
		return 0, err
	}
	if rv.n == 0 {
		return 0, nil
	}
	leave, err := d.enter()
	if err != nil {
		return 0, err
	}
	defer leave()
	s := &scratch{d: d}
	vals := s.alloc(backend.Float32, rv.n)
	out := s.alloc(backend.Int64, 1)
	defer s.release()
	if s.err != nil {
		return 0, s.err
	}
	er, err := d.checks.slot(d, op, "rows", rv, nrows)
	if err != nil {
		return 0, err
	}
	el, err := d.checks.slot(d, op, "labels", lv, cols)
	if err != nil {
		return 0, err
	}
	if err := d.launchN("nll_gather", int64(rv.n), uint64(vals.ptr), uint64(lp.ptr), uint64(rv.ptr), uint64(lv.ptr), cu.I64(int64(rv.n)),
		cu.I64(int64(nrows)), cu.I64(int64(cols)), er, el); err != nil {
		return 0, err
	}
	if err := d.sumLocked(vals.ptr, int64(rv.n), out.ptr); err != nil {
		return 0, err
	}
	sum, err := d.readF64(out.ptr)
	if err != nil {
		return 0, err
	}
	if err := d.checks.flush(d); err != nil {
		return 0, err
	}
	return -sum / float64(rv.n), nil
}

// NLLLossBackward writes dlogp = 0 except -scale/len(rows) at each
// (rows[i], labels[i]), accumulating repeated pairs.
func (d *Device) NLLLossBackward(dlogp, rows, labels backend.Buffer, nrows, cols int, scale float32) error {
	const op = "NLLLossBackward"
	rv, lv, err := d.nllArgs(op, rows, labels, nrows, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dlogp", dlogp, nrows*cols)
	if err != nil {
		return err
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	if dv.n > 0 {
		if err := d.timed("memset", func() error { return cu.MemsetD8Async(dv.ptr, 0, uint64(4*dv.n), d.stream) }); err != nil {
			return err
		}
	}
	if rv.n == 0 {
		return nil
	}
	er, err := d.checks.slot(d, op, "rows", rv, nrows)
	if err != nil {
		return err
	}
	el, err := d.checks.slot(d, op, "labels", lv, cols)
	if err != nil {
		return err
	}
	g := -scale / float32(rv.n)
	return d.launchN("nll_backward", int64(rv.n), uint64(dv.ptr), uint64(rv.ptr), uint64(lv.ptr), cu.I64(int64(rv.n)),
		cu.I64(int64(nrows)), cu.I64(int64(cols)), cu.F32(g), er, el)
}

// GatherRows copies dst[i,:] = x[idx[i],:]. Indices are checked on the
// device; a bad one is reported by the next Synchronize.
func (d *Device) GatherRows(dst, x, idx backend.Buffer, xrows, cols int) error {
	g, err := d.gatherArgs("GatherRows", dst, x, idx, xrows, cols)
	if err != nil {
		return err
	}
	return d.gather(g)
}

// gatherCall is a checked GatherRows (or GatherRowsDropout) call.
type gatherCall struct {
	op          string
	dst, x, idx *Buffer
	bf16        bool // x is bfloat16 (else float32)
	xrows, cols int
	drop        []uint64 // the dropout kernels' p, keep and seed; nil: none
}

// gatherArgs checks GatherRows' arguments, which GatherRowsDropout
// shares: x and dst float32 or bfloat16, x of xrows x cols, idx int32,
// dst of len(idx) x cols.
func (d *Device) gatherArgs(op string, dst, x, idx backend.Buffer, xrows, cols int) (gatherCall, error) {
	xn, err := backend.Dims(op, xrows, cols)
	if err != nil {
		return gatherCall{}, err
	}
	iv, err := d.i32Any(op, "idx", idx)
	if err != nil {
		return gatherCall{}, err
	}
	dn, err := backend.Dims(op, iv.n, cols)
	if err != nil {
		return gatherCall{}, err
	}
	dv, err := d.float(op, "dst", dst, dn)
	if err != nil {
		return gatherCall{}, err
	}
	xv, err := d.float(op, "x", x, xn)
	if err != nil {
		return gatherCall{}, err
	}
	return gatherCall{op: op, dst: dv, x: xv, idx: iv, bf16: xv.dt == backend.BFloat16, xrows: xrows, cols: cols}, nil
}

// gather queues g with its index check: one kernel of the gather_rows
// family (gather_rows, gather_rows4, gather_rows_bf16, gather_rows_bf16x4,
// each with a _drop form taking g.drop), the vector form (four values a
// thread) when the rows and pointers allow.
func (d *Device) gather(g gatherCall) error {
	n, c := int64(g.idx.n), int64(g.cols)
	if n*c == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	slot, err := d.checks.slot(d, g.op, "idx", g.idx, g.xrows)
	if err != nil {
		return err
	}
	name, vec, xalign, dalign, width := "gather_rows", "gather_rows4", cu.DevPtr(16), cu.DevPtr(16), int64(4)
	switch {
	case g.dst.dt == backend.BFloat16 && g.bf16:
		// bfloat16 rows into a bfloat16 batch: 16-byte vectors of 8.
		name, vec, xalign, dalign, width = "gather_rows_b2b", "gather_rows_b2b8", 16, 16, 8
	case g.dst.dt == backend.BFloat16 && c%8 == 0 && g.dst.ptr%16 == 0:
		// float32 rows into a bfloat16 batch, 8 a thread (two 16-byte
		// loads, one 16-byte store).
		name, vec, xalign, dalign, width = "gather_rows_f2b", "gather_rows_f2b8", 16, 16, 8
	case g.dst.dt == backend.BFloat16:
		name, vec, xalign, dalign = "gather_rows_f2b", "gather_rows_f2b4", 16, 8
	case g.bf16:
		name, vec, xalign = "gather_rows_bf16", "gather_rows_bf16x4", 8
	}
	items := n * c
	if c%width == 0 && g.dst.ptr%dalign == 0 && g.x.ptr%xalign == 0 {
		name, items, c = vec, items/width, c/width
	}
	if g.drop != nil {
		name += "_drop"
	}
	args := append([]uint64{uint64(g.dst.ptr), uint64(g.x.ptr), uint64(g.idx.ptr), cu.I64(n), cu.I64(int64(g.xrows)), cu.I64(c), slot}, g.drop...)
	return d.launchN(name, items, args...)
}

// ScatterAddRows accumulates dst[idx[i],:] += src[i,:]. The indices are
// bucketed by destination with a stable sort on the device, and each
// destination element is summed by one thread in increasing i: no
// floating-point atomics, deterministic.
func (d *Device) ScatterAddRows(dst, src, idx backend.Buffer, dstRows, cols int) error {
	const op = "ScatterAddRows"
	dn, err := backend.Dims(op, dstRows, cols)
	if err != nil {
		return err
	}
	iv, err := d.i32Any(op, "idx", idx)
	if err != nil {
		return err
	}
	sn, err := backend.Dims(op, iv.n, cols)
	if err != nil {
		return err
	}
	dv, err := d.f32(op, "dst", dst, dn)
	if err != nil {
		return err
	}
	sv, err := d.f32(op, "src", src, sn)
	if err != nil {
		return err
	}
	if iv.n >= 1<<31-1 || dstRows >= 1<<31-1 {
		return &backend.ShapeError{Op: op, Msg: "more than 2^31-2 indices or rows"}
	}
	if iv.n == 0 {
		return nil
	}
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	slot, err := d.checks.slot(d, op, "idx", iv, dstRows)
	if err != nil {
		return err
	}
	if cols == 0 {
		// Still validate the indices.
		ptr, order, err := d.bucket(iv, dstRows, slot)
		d.freeLocked(ptr)
		d.freeLocked(order)
		return err
	}
	ptr, order, err := d.bucket(iv, dstRows, slot)
	if err != nil {
		return err
	}
	defer d.freeLocked(ptr)
	defer d.freeLocked(order)
	return d.launchN("scatter_add_bucketed", int64(dn), uint64(dv.ptr), uint64(sv.ptr), uint64(ptr.ptr), uint64(order.ptr), cu.I64(int64(dstRows)), cu.I64(int64(cols)))
}
