// Elementwise, reduction and loss kernels.

extern "C" __global__ void fill_f32(float* d, float v, i64 n) {
  GRID_STRIDE(i, n) d[i] = v;
}

extern "C" __global__ void scale_f32(float* d, float beta, i64 n) {
  GRID_STRIDE(i, n) d[i] = beta == 0.0f ? 0.0f : d[i] * beta;
}

extern "C" __global__ void axpby_f32(float* d, float a, const float* x, float b, const float* y, i64 n) {
  GRID_STRIDE(i, n) d[i] = a * x[i] + b * y[i];
}

// bfloat16 forms of scale_f32 and axpby_f32 (activations and their
// gradients): widened, computed in float32 as there, rounded on store.
extern "C" __global__ void scale_bf16(bf16* d, float beta, i64 n) {
  GRID_STRIDE(i, n) d[i] = beta == 0.0f ? (bf16)0 : f32_to_bf16(bf16_to_f32(d[i]) * beta);
}

extern "C" __global__ void axpby_bf16(bf16* d, float a, const bf16* x, float b, const bf16* y, i64 n) {
  GRID_STRIDE(i, n) d[i] = f32_to_bf16(a * bf16_to_f32(x[i]) + b * bf16_to_f32(y[i]));
}

// axpby_bf16 with 8 values a thread (n % 8 == 0, 16-byte aligned
// buffers): each value's expression is axpby_bf16's, so its result bit
// for bit. d may alias x or y (each thread reads its 8 before writing).
extern "C" __global__ void axpby_bf16x8(uint4* d, float a, const uint4* x, float b, const uint4* y, i64 n8) {
  GRID_STRIDE(k, n8) {
    float xv[8], yv[8];
    f8_unpack(as_f32(x[k]), xv);
    f8_unpack(as_f32(y[k]), yv);
#pragma unroll
    for (int j = 0; j < 8; j++) xv[j] = a * xv[j] + b * yv[j];
    d[k] = to_bf16(f8_pack(xv));
  }
}

extern "C" __global__ void mul_f32(float* d, const float* x, const float* y, i64 n) {
  GRID_STRIDE(i, n) d[i] = x[i] * y[i];
}

extern "C" __global__ void add_row_vector(float* d, const float* x, const float* v, i64 n, i64 cols) {
  GRID_STRIDE(i, n) d[i] = x[i] + v[i % cols];
}

// Unary ops: 1 relu, 2 leaky_relu, 3 elu, 4 exp, 5 identity (backend.UnaryOp).
extern "C" __global__ void unary_f32(int op, float alpha, float* d, const float* x, i64 n) {
  GRID_STRIDE(i, n) {
    float v = x[i];
    switch (op) {
      case 1: v = fmaxf(v, 0.0f); break;
      case 2: if (v <= 0.0f) v *= alpha; break;
      case 3: if (v <= 0.0f) v = alpha * expm1f(v); break;
      case 4: v = expf(v); break;
      default: break;
    }
    d[i] = v;
  }
}

// Derivatives at x == 0 are taken from the left, as in PyTorch.
extern "C" __global__ void unary_backward_f32(int op, float alpha, float* dx, const float* x, const float* y,
                                              const float* dy, i64 n) {
  GRID_STRIDE(i, n) {
    float g = dy[i], xv = x[i], r;
    switch (op) {
      case 1: r = xv > 0.0f ? g : 0.0f; break;
      case 2: r = xv > 0.0f ? g : g * alpha; break;
      case 3: r = xv > 0.0f ? g : g * alpha * expf(xv); break;
      case 4: r = g * y[i]; break;
      default: r = g; break;
    }
    dx[i] = r;
  }
}

// Dropout keeps element i iff rng.DropUniform(seed, i) >= p, exactly as
// the CPU back end, so masks are identical on every device.
extern "C" __global__ void dropout_f32(float* d, float* mask, const float* x, float p, float keep, u64 seed, i64 n) {
  GRID_STRIDE(i, n) {
    float m = drop_factor(p, keep, seed, i);
    mask[i] = m;
    d[i] = x[i] * m;
  }
}

extern "C" __global__ void adam_step(float* p, const float* g, float* m, float* v, float lr_bc1, float rbc2,
                                     float b1, float b2, float eps, float wd, i64 n) {
  GRID_STRIDE(i, n) {
    float gi = g[i] + wd * p[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) * rbc2 + eps;
    p[i] -= lr_bc1 * mi / denom;
  }
}

// Sum, pass 1: block b sums a grid-stride slice in double and reduces it
// with a fixed tree; the grid size depends only on n, so the result is
// the same on every run.
extern "C" __global__ void sum_partial(const float* x, i64 n, double* partial) {
  __shared__ double sh[256];
  double acc = 0.0;
  GRID_STRIDE(i, n) acc += (double)x[i];
  double s = block_sum_double(acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Sum, pass 2: one block of 256 threads reduces the partial sums.
extern "C" __global__ void sum_final(const double* partial, int np, double* out) {
  __shared__ double sh[256];
  double acc = 0.0;
  for (int i = threadIdx.x; i < np; i += blockDim.x) acc += partial[i];
  double s = block_sum_double(acc, sh);
  if (threadIdx.x == 0) out[0] = s;
}

// SumRows, pass 1: block (bx, by) sums rows [by*chunk, (by+1)*chunk) of
// columns [bx*32, bx*32+32) in double; threads (tx, ty) stride rows by 8
// and the 8 row groups are combined in order.
extern "C" __global__ void sum_rows_partial(const float* x, i64 rows, i64 cols, i64 chunk, double* partial) {
  __shared__ double sh[8][33];
  i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double acc = 0.0;
  if (c < cols)
    for (i64 r = r0 + threadIdx.y; r < r1; r += 8) acc += (double)x[r * cols + c];
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double s = 0.0;
    for (int k = 0; k < 8; k++) s += sh[k][threadIdx.x];
    partial[(i64)blockIdx.y * cols + c] = s;
  }
}

// sum_rows_partial over a bfloat16 x (widened exactly).
extern "C" __global__ void sum_rows_partial_bf16(const bf16* x, i64 rows, i64 cols, i64 chunk, double* partial) {
  __shared__ double sh[8][33];
  i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double acc = 0.0;
  if (c < cols)
    for (i64 r = r0 + threadIdx.y; r < r1; r += 8) acc += (double)bf16_to_f32(x[r * cols + c]);
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double s = 0.0;
    for (int k = 0; k < 8; k++) s += sh[k][threadIdx.x];
    partial[(i64)blockIdx.y * cols + c] = s;
  }
}

// SumRows, pass 2: one warp per column; lane l adds chunks l, l+32, ...
// in order, then the lanes combine in a fixed tree (deterministic).
extern "C" __global__ void sum_rows_final(const double* partial, i64 nchunks, i64 cols, float* d) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 c = warp; c < cols; c += nwarps) {
    double s = 0.0;
    for (i64 k = lane; k < nchunks; k += 32) s += partial[k * cols + c];
    s = warp_sum_double(s);
    if (lane == 0) d[c] = (float)s;
  }
}

// One warp per row: the first column holding the row maximum.
extern "C" __global__ void argmax_rows(int* d, const float* x, i64 rows, i64 cols) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 r = warp; r < rows; r += nwarps) {
    const float* xr = x + r * cols;
    float best = xr[0];
    i64 bi = 0;
    for (i64 c = lane; c < cols; c += 32) {
      float v = xr[c];
      if (v > best || (c < bi && v == best)) { best = v; bi = c; }
    }
    // Lane 0's start (column 0) may beat its scan; combine lanes keeping
    // the larger value, ties to the lower column.
    for (int o = 16; o > 0; o >>= 1) {
      float ob = __shfl_xor_sync(0xffffffffu, best, o);
      i64 oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ob > best || (ob == best && oi < bi)) { best = ob; bi = oi; }
    }
    if (lane == 0) d[r] = (int)bi;
  }
}

// One warp per row: log-softmax with the sum of exponentials in double.
extern "C" __global__ void log_softmax(float* d, const float* x, i64 rows, i64 cols) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 r = warp; r < rows; r += nwarps) {
    const float* xr = x + r * cols;
    float m = xr[0];
    for (i64 c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    m = warp_max_float(m);
    double s = 0.0;
    for (i64 c = lane; c < cols; c += 32) s += exp((double)(xr[c] - m));
    s = warp_sum_double(s);
    double lse = (double)m + log(s);
    for (i64 c = lane; c < cols; c += 32) d[r * cols + c] = (float)((double)xr[c] - lse);
  }
}

extern "C" __global__ void log_softmax_backward(float* dx, const float* y, const float* dy, i64 rows, i64 cols) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 r = warp; r < rows; r += nwarps) {
    double s = 0.0;
    for (i64 c = lane; c < cols; c += 32) s += (double)dy[r * cols + c];
    s = warp_sum_double(s);
    for (i64 c = lane; c < cols; c += 32) {
      i64 k = r * cols + c;
      dx[k] = (float)((double)dy[k] - exp((double)y[k]) * s);
    }
  }
}

// NLL: vals[i] = logp[rows[i], labels[i]] (0 and an index error when out
// of range); the host then sums vals deterministically.
extern "C" __global__ void nll_gather(float* vals, const float* logp, const int* rows, const int* labels, i64 n,
                                      i64 nrows, i64 cols, u64* err_rows, u64* err_labels) {
  GRID_STRIDE(i, n) {
    int r = rows[i], l = labels[i];
    bool ok = true;
    if (r < 0 || r >= nrows) { index_error(err_rows, i); ok = false; }
    if (l < 0 || l >= cols) { index_error(err_labels, i); ok = false; }
    vals[i] = ok ? logp[(i64)r * cols + l] : 0.0f;
  }
}

// NLL backward: every addend is the same value g, so the atomic sums of
// repeated (row, label) pairs are identical whatever the order.
extern "C" __global__ void nll_backward(float* dlogp, const int* rows, const int* labels, i64 n, i64 nrows, i64 cols,
                                        float g, u64* err_rows, u64* err_labels) {
  GRID_STRIDE(i, n) {
    int r = rows[i], l = labels[i];
    bool ok = true;
    if (r < 0 || r >= nrows) { index_error(err_rows, i); ok = false; }
    if (l < 0 || l >= cols) { index_error(err_labels, i); ok = false; }
    if (ok) atomicAdd(&dlogp[(i64)r * cols + l], g);
  }
}

// drop_scale is v times its dropout mask value (drop_factor), for the
// four values of vector k4 (elements 4*k4 ...) in the float4 form.
__device__ __forceinline__ float drop_scale(float v, float p, float keep, u64 seed, i64 k) {
  return v * drop_factor(p, keep, seed, k);
}

__device__ __forceinline__ float4 drop_scale(float4 v, float p, float keep, u64 seed, i64 k4) {
  return drop_scale4(v, p, keep, seed, k4 * 4);
}

// gather_rows_body is the one body of the gather_rows kernels: d[i, :] =
// x[idx[i], :] with x's values In (float or bf16, or four a thread: float4
// or uint2, with Out float4 and cols counting vectors) widened by as_f32;
// rows with a bad index are zeroed and reported. With Drop (fused.cu's
// _drop kernels: GatherRowsDropout) each value is scaled by its dropout
// mask value as it is stored.
template <bool Drop, typename Out, typename In>
__device__ __forceinline__ void gather_rows_body(Out* d, const In* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                                 u64* err, float p, float keep, u64 seed) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    int j = idx[i];
    if (j < 0 || j >= xrows) {
      if (c == 0) index_error(err, i);
      d[k] = Out();
    } else {
      Out v = as_f32(x[(i64)j * cols + c]);
      if constexpr (Drop) v = drop_scale(v, p, keep, seed, k);
      d[k] = v;
    }
  }
}

// dst[i, :] = x[idx[i], :]; rows with a bad index are zeroed and reported.
extern "C" __global__ void gather_rows(float* d, const float* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                       u64* err) {
  gather_rows_body<false>(d, x, idx, n, xrows, cols, err, 0.0f, 1.0f, 0);
}

// gather_rows4 is gather_rows for cols % 4 == 0 with 16-byte accesses.
extern "C" __global__ void gather_rows4(float4* d, const float4* x, const int* idx, i64 n, i64 xrows, i64 cols4,
                                        u64* err) {
  gather_rows_body<false>(d, x, idx, n, xrows, cols4, err, 0.0f, 1.0f, 0);
}

// gather_rows from a bfloat16 x, widened to float32 (exact).
extern "C" __global__ void gather_rows_bf16(float* d, const bf16* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                            u64* err) {
  gather_rows_body<false>(d, x, idx, n, xrows, cols, err, 0.0f, 1.0f, 0);
}

// gather_rows_bf16x4 is gather_rows_bf16 for cols % 4 == 0: 8-byte loads
// of four values, 16-byte stores.
extern "C" __global__ void gather_rows_bf16x4(float4* d, const uint2* x, const int* idx, i64 n, i64 xrows, i64 cols4,
                                              u64* err) {
  gather_rows_body<false>(d, x, idx, n, xrows, cols4, err, 0.0f, 1.0f, 0);
}

__device__ __forceinline__ f8 drop_scale(f8 v, float p, float keep, u64 seed, i64 k8) {
  v.lo = drop_scale(v.lo, p, keep, seed, 2 * k8);
  v.hi = drop_scale(v.hi, p, keep, seed, 2 * k8 + 1);
  return v;
}

// gather_rows_bf16_body is gather_rows_body into a bfloat16 dst (Out
// bf16, or vectors of them: uint2 for 4, uint4 for 8): bfloat16 values
// are copied, float32 ones rounded; with Drop each value is widened,
// scaled by its mask value and rounded.
template <bool Drop, typename Out, typename In>
__device__ __forceinline__ void gather_rows_bf16_body(Out* d, const In* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                                      u64* err, float p, float keep, u64 seed) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    int j = idx[i];
    if (j < 0 || j >= xrows) {
      if (c == 0) index_error(err, i);
      d[k] = Out();
    } else {
      In v = x[(i64)j * cols + c];
      if constexpr (Drop) d[k] = to_bf16(drop_scale(as_f32(v), p, keep, seed, k));
      else d[k] = to_bf16(v);
    }
  }
}

// GatherRows into a bfloat16 batch: from a bfloat16 table (b2b; b2b8:
// cols % 8 == 0, 16-byte vectors) or a float32 one (f2b; f2b4: cols % 4
// == 0, float4 loads, 8-byte stores).
extern "C" __global__ void gather_rows_b2b(bf16* d, const bf16* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                           u64* err) {
  gather_rows_bf16_body<false>(d, x, idx, n, xrows, cols, err, 0.0f, 1.0f, 0);
}

extern "C" __global__ void gather_rows_b2b8(uint4* d, const uint4* x, const int* idx, i64 n, i64 xrows, i64 cols8,
                                            u64* err) {
  gather_rows_bf16_body<false>(d, x, idx, n, xrows, cols8, err, 0.0f, 1.0f, 0);
}

extern "C" __global__ void gather_rows_f2b(bf16* d, const float* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                           u64* err) {
  gather_rows_bf16_body<false>(d, x, idx, n, xrows, cols, err, 0.0f, 1.0f, 0);
}

extern "C" __global__ void gather_rows_f2b4(uint2* d, const float4* x, const int* idx, i64 n, i64 xrows, i64 cols4,
                                            u64* err) {
  gather_rows_bf16_body<false>(d, x, idx, n, xrows, cols4, err, 0.0f, 1.0f, 0);
}

// From a float32 table, 8 values a thread (cols % 8 == 0, 16-byte
// aligned): two 16-byte loads, one 16-byte store.
extern "C" __global__ void gather_rows_f2b8(uint4* d, const f8* x, const int* idx, i64 n, i64 xrows, i64 cols8,
                                            u64* err) {
  gather_rows_bf16_body<false>(d, x, idx, n, xrows, cols8, err, 0.0f, 1.0f, 0);
}

extern "C" __global__ void gather_rows_f2b8_drop(uint4* d, const f8* x, const int* idx, i64 n, i64 xrows, i64 cols8,
                                                 u64* err, float p, float keep, u64 seed) {
  gather_rows_bf16_body<true>(d, x, idx, n, xrows, cols8, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_b2b_drop(bf16* d, const bf16* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                                u64* err, float p, float keep, u64 seed) {
  gather_rows_bf16_body<true>(d, x, idx, n, xrows, cols, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_b2b8_drop(uint4* d, const uint4* x, const int* idx, i64 n, i64 xrows, i64 cols8,
                                                 u64* err, float p, float keep, u64 seed) {
  gather_rows_bf16_body<true>(d, x, idx, n, xrows, cols8, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_f2b_drop(bf16* d, const float* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                                u64* err, float p, float keep, u64 seed) {
  gather_rows_bf16_body<true>(d, x, idx, n, xrows, cols, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_f2b4_drop(uint2* d, const float4* x, const int* idx, i64 n, i64 xrows,
                                                 i64 cols4, u64* err, float p, float keep, u64 seed) {
  gather_rows_bf16_body<true>(d, x, idx, n, xrows, cols4, err, p, keep, seed);
}

// Convert: float32 to bfloat16 (round to nearest even) and back (exact).
extern "C" __global__ void convert_f32_bf16(bf16* d, const float* x, i64 n) {
  GRID_STRIDE(i, n) d[i] = f32_to_bf16(x[i]);
}

extern "C" __global__ void convert_bf16_f32(float* d, const bf16* x, i64 n) {
  GRID_STRIDE(i, n) d[i] = bf16_to_f32(x[i]);
}

// ScatterAddRows after bucketing: destination row r adds the source rows
// order[ptr[r]..ptr[r+1]) in that (increasing i) order.
extern "C" __global__ void scatter_add_bucketed(float* d, const float* src, const i64* ptr, const int* order,
                                                i64 dst_rows, i64 cols) {
  GRID_STRIDE(k, dst_rows * cols) {
    i64 r = k / cols, c = k - r * cols;
    i64 p0 = ptr[r], p1 = ptr[r + 1];
    if (p0 == p1) continue;
    float acc = d[k];
    for (i64 p = p0; p < p1; p++) acc += src[(i64)order[p] * cols + c];
    d[k] = acc;
  }
}
