// Fused elementwise kernels for full-graph training (package fullgraph
// reaches them through Device.BiasAct and Device.ReLUMaskScale). Each
// computes exactly what the unfused sequence of back-end ops computes, in
// the same order, in one pass over memory.

// d = act((a + b) + bias[col]) for a rows x cols matrix; b may be NULL;
// act is max(v, 0) when relu is set, else the identity. d may alias a or
// b. The column comes from a 32-bit remainder while the element count
// fits (64-bit division is slow on the GPU).
extern "C" __global__ void bias_act(float* d, const float* a, const float* b, const float* bias, i64 n, i64 cols,
                                    int relu) {
  bool small = n <= 0xffffffffLL;
  GRID_STRIDE(i, n) {
    i64 c = small ? (i64)((u32)i % (u32)cols) : i % cols;
    float v = a[i];
    if (b) v = v + b[i];
    v = v + bias[c];
    if (relu) v = fmaxf(v, 0.0f);
    d[i] = v;
  }
}

// d = y > 0 ? dy * scale : 0: the ReLU derivative through y (which is
// positive exactly where the ReLU's input was), times the dropout keep
// scale. d may alias dy or y.
extern "C" __global__ void relu_mask_scale(float* d, const float* dy, const float* y, float scale, i64 n) {
  GRID_STRIDE(i, n) d[i] = y[i] > 0.0f ? dy[i] * scale : 0.0f;
}

// ---- Training-step chains without stored dropout masks (backend.Fused),
// each value scaled by drop_factor (common.cuh), the regenerated mask.

// GatherRows then Dropout: d[k] = x[idx[i], c] * drop_factor(k), the
// gather_rows kernels' body (dense.cu) with its dropout compiled in.
extern "C" __global__ void gather_rows_drop(float* d, const float* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                            u64* err, float p, float keep, u64 seed) {
  gather_rows_body<true>(d, x, idx, n, xrows, cols, err, p, keep, seed);
}

extern "C" __global__ void gather_rows4_drop(float4* d, const float4* x, const int* idx, i64 n, i64 xrows, i64 cols4,
                                             u64* err, float p, float keep, u64 seed) {
  gather_rows_body<true>(d, x, idx, n, xrows, cols4, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_bf16_drop(float* d, const bf16* x, const int* idx, i64 n, i64 xrows, i64 cols,
                                                 u64* err, float p, float keep, u64 seed) {
  gather_rows_body<true>(d, x, idx, n, xrows, cols, err, p, keep, seed);
}

extern "C" __global__ void gather_rows_bf16x4_drop(float4* d, const uint2* x, const int* idx, i64 n, i64 xrows,
                                                   i64 cols4, u64* err, float p, float keep, u64 seed) {
  gather_rows_body<true>(d, x, idx, n, xrows, cols4, err, p, keep, seed);
}

// d = Dropout(act((a + b) + bias[col])): bias_act followed by the mask,
// in the order of the unfused ops. d may alias a or b.
extern "C" __global__ void bias_act_drop(float* d, const float* a, const float* b, const float* bias, i64 n, i64 cols,
                                         int relu, float p, float keep, u64 seed) {
  bool small = n <= 0xffffffffLL;
  GRID_STRIDE(i, n) {
    i64 c = small ? (i64)((u32)i % (u32)cols) : i % cols;
    float v = a[i];
    if (b) v = v + b[i];
    v = v + bias[c];
    if (relu) v = fmaxf(v, 0.0f);
    if (p != 0.0f) v = v * drop_factor(p, keep, seed, i);
    d[i] = v;
  }
}

// The gradient through bias_act_drop's dropout and activation at flat
// element i: with relu, y > 0 marks kept elements with a positive input.
__device__ __forceinline__ float act_drop_grad(float y, float dy, int relu, float p, float keep, u64 seed, i64 i) {
  if (relu) return y > 0.0f ? dy * keep : 0.0f;
  return dy * drop_factor(p, keep, seed, i);
}

extern "C" __global__ void act_drop_bwd(float* dx, const float* y, const float* dy, i64 n, int relu, float p,
                                        float keep, u64 seed) {
  GRID_STRIDE(i, n) dx[i] = act_drop_grad(y[i], dy[i], relu, p, keep, seed, i);
}

// act_drop_bwd fused with SumRows' first pass (sum_rows_partial's grid:
// 32 columns x 8 rows a block, blockIdx.y a chunk of rows): each thread
// writes the gradients of its elements and sums them in double.
extern "C" __global__ void act_drop_bwd_partial(float* dx, const float* y, const float* dy, i64 rows, i64 cols,
                                                i64 chunk, int relu, float p, float keep, u64 seed, double* partial) {
  __shared__ double sh[8][33];
  i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double acc = 0.0;
  if (c < cols)
    for (i64 r = r0 + threadIdx.y; r < r1; r += 8) {
      i64 i = r * cols + c;
      float g = act_drop_grad(y[i], dy[i], relu, p, keep, seed, i);
      dx[i] = g;
      acc += (double)g;
    }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double s = 0.0;
    for (int k = 0; k < 8; k++) s += sh[k][threadIdx.x];
    partial[(i64)blockIdx.y * cols + c] = s;
  }
}

// sum_rows_final that adds to d when acc is set: d[c] = sum + d[c], what
// SumRows into a temporary and Axpby(d, 1, tmp, 1, d) compute.
extern "C" __global__ void sum_rows_final_acc(const double* partial, i64 nchunks, i64 cols, float* d, int acc) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 c = warp; c < cols; c += nwarps) {
    double s = 0.0;
    for (i64 k = lane; k < nchunks; k += 32) s += partial[k * cols + c];
    s = warp_sum_double(s);
    if (lane == 0) d[c] = acc ? (float)s + d[c] : (float)s;
  }
}

// ---- bfloat16 activations (backend.BF16Activations): the chains above
// with a and b (or y and dy) of type TI and the output of type TO, each
// float or bf16, widened on read and rounded on store (store_as); the
// float32 arithmetic is the kernels' above. Kernel names end in the
// dtypes' letters, input then output: _bb, _bf, _fb (f float32, b
// bfloat16).

// store_get stores v as d's type and returns what was stored, widened.
__device__ __forceinline__ float store_get(float* d, i64 i, float v) {
  d[i] = v;
  return v;
}
__device__ __forceinline__ float store_get(bf16* d, i64 i, float v) {
  bf16 h = f32_to_bf16(v);
  d[i] = h;
  return bf16_to_f32(h);
}

template <typename TI, typename TO>
__device__ __forceinline__ void bias_act_drop_body(TO* d, const TI* a, const TI* b, const float* bias, i64 n, i64 cols,
                                                   int relu, float p, float keep, u64 seed) {
  bool small = n <= 0xffffffffLL;
  GRID_STRIDE(i, n) {
    i64 c = small ? (i64)((u32)i % (u32)cols) : i % cols;
    float v = as_f32(a[i]);
    if (b) v = v + as_f32(b[i]);
    v = v + bias[c];
    if (relu) v = fmaxf(v, 0.0f);
    if (p != 0.0f) v = v * drop_factor(p, keep, seed, i);
    store_as(d, i, v);
  }
}

extern "C" __global__ void bias_act_drop_bb(bf16* d, const bf16* a, const bf16* b, const float* bias, i64 n, i64 cols,
                                            int relu, float p, float keep, u64 seed) {
  bias_act_drop_body(d, a, b, bias, n, cols, relu, p, keep, seed);
}

extern "C" __global__ void bias_act_drop_bf(float* d, const bf16* a, const bf16* b, const float* bias, i64 n, i64 cols,
                                            int relu, float p, float keep, u64 seed) {
  bias_act_drop_body(d, a, b, bias, n, cols, relu, p, keep, seed);
}

extern "C" __global__ void bias_act_drop_fb(bf16* d, const float* a, const float* b, const float* bias, i64 n, i64 cols,
                                            int relu, float p, float keep, u64 seed) {
  bias_act_drop_body(d, a, b, bias, n, cols, relu, p, keep, seed);
}

template <typename TI, typename TO>
__device__ __forceinline__ void act_drop_bwd_body(TO* dx, const TI* y, const TI* dy, i64 n, int relu, float p,
                                                  float keep, u64 seed) {
  GRID_STRIDE(i, n) store_as(dx, i, act_drop_grad(as_f32(y[i]), as_f32(dy[i]), relu, p, keep, seed, i));
}

extern "C" __global__ void act_drop_bwd_bb(bf16* dx, const bf16* y, const bf16* dy, i64 n, int relu, float p,
                                           float keep, u64 seed) {
  act_drop_bwd_body(dx, y, dy, n, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd_bf(float* dx, const bf16* y, const bf16* dy, i64 n, int relu, float p,
                                           float keep, u64 seed) {
  act_drop_bwd_body(dx, y, dy, n, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd_fb(bf16* dx, const float* y, const float* dy, i64 n, int relu, float p,
                                           float keep, u64 seed) {
  act_drop_bwd_body(dx, y, dy, n, relu, p, keep, seed);
}

// act_drop_bwd_partial's body over the dtypes: the bias sums add the
// gradients as stored (rounded when dx is bfloat16), SumRows(dx).
template <typename TI, typename TO>
__device__ __forceinline__ void act_drop_bwd_partial_body(TO* dx, const TI* y, const TI* dy, i64 rows, i64 cols,
                                                          i64 chunk, int relu, float p, float keep, u64 seed,
                                                          double* partial) {
  __shared__ double sh[8][33];
  i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double acc = 0.0;
  if (c < cols)
    for (i64 r = r0 + threadIdx.y; r < r1; r += 8) {
      i64 i = r * cols + c;
      acc += (double)store_get(dx, i, act_drop_grad(as_f32(y[i]), as_f32(dy[i]), relu, p, keep, seed, i));
    }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double s = 0.0;
    for (int k = 0; k < 8; k++) s += sh[k][threadIdx.x];
    partial[(i64)blockIdx.y * cols + c] = s;
  }
}

extern "C" __global__ void act_drop_bwd_partial_bb(bf16* dx, const bf16* y, const bf16* dy, i64 rows, i64 cols,
                                                   i64 chunk, int relu, float p, float keep, u64 seed,
                                                   double* partial) {
  act_drop_bwd_partial_body(dx, y, dy, rows, cols, chunk, relu, p, keep, seed, partial);
}

extern "C" __global__ void act_drop_bwd_partial_bf(float* dx, const bf16* y, const bf16* dy, i64 rows, i64 cols,
                                                   i64 chunk, int relu, float p, float keep, u64 seed,
                                                   double* partial) {
  act_drop_bwd_partial_body(dx, y, dy, rows, cols, chunk, relu, p, keep, seed, partial);
}

extern "C" __global__ void act_drop_bwd_partial_fb(bf16* dx, const float* y, const float* dy, i64 rows, i64 cols,
                                                   i64 chunk, int relu, float p, float keep, u64 seed,
                                                   double* partial) {
  act_drop_bwd_partial_body(dx, y, dy, rows, cols, chunk, relu, p, keep, seed, partial);
}

// ---- The wide forms of the bfloat16 chains above: 8 values a thread
// (TI8 and TO8 uint4 for 8 bfloat16, f8 for 8 float32), used where cols
// % 8 == 0 and every operand is 16-byte aligned; kernel names end in 8
// (bias_act_drop_bb8, ...). Each value is computed exactly as the
// one-value kernels compute it (the same float32 operations in the same
// order, the mask drawn at the same flat index), so the results are
// theirs bit for bit; the bias sums add each column's values in the same
// order too.

// drop_factors8 writes the mask values of elements i0 .. i0+7 (i0 % 8 ==
// 0) to f from two hashes (drop_factors4).
__device__ __forceinline__ void drop_factors8(float p, float keep, u64 seed, i64 i0, float* f) {
  float4 a = drop_factors4(p, keep, seed, i0), b = drop_factors4(p, keep, seed, i0 + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// act_drop_grads8 is act_drop_grad of the 8 values of vector k (flat
// elements 8k ...), g holding dy on entry: the mask's hashes are drawn
// only without relu, where the gradient needs them.
__device__ __forceinline__ void act_drop_grads8(const float* yv, float* g, int relu, float p, float keep, u64 seed,
                                                i64 k) {
  float f[8];
  if (relu) {
#pragma unroll
    for (int j = 0; j < 8; j++) g[j] = yv[j] > 0.0f ? g[j] * keep : 0.0f;
    return;
  }
  drop_factors8(p, keep, seed, k * 8, f);
#pragma unroll
  for (int j = 0; j < 8; j++) g[j] = g[j] * f[j];
}

template <typename TI8, typename TO8>
__device__ __forceinline__ void bias_act_drop_body8(TO8* d, const TI8* a, const TI8* b, const float* bias, i64 n8,
                                                    i64 cols, int relu, float p, float keep, u64 seed) {
  bool small = n8 * 8 <= 0xffffffffLL;
  GRID_STRIDE(k, n8) {
    i64 i0 = k * 8;  // flat index of the first value; its 8 share a row
    i64 c0 = small ? (i64)((u32)i0 % (u32)cols) : i0 % cols;
    float v[8];
    f8_unpack(as_f32(a[k]), v);
    if (b) {
      float w[8];
      f8_unpack(as_f32(b[k]), w);
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = v[j] + w[j];
    }
    float f[8];
    if (p != 0.0f) drop_factors8(p, keep, seed, i0, f);
#pragma unroll
    for (int j = 0; j < 8; j++) {
      float x = v[j] + bias[c0 + j];
      if (relu) x = fmaxf(x, 0.0f);
      if (p != 0.0f) x = x * f[j];
      v[j] = x;
    }
    store8(d, k, f8_pack(v));
  }
}

extern "C" __global__ void bias_act_drop_bb8(uint4* d, const uint4* a, const uint4* b, const float* bias, i64 n8,
                                             i64 cols, int relu, float p, float keep, u64 seed) {
  bias_act_drop_body8(d, a, b, bias, n8, cols, relu, p, keep, seed);
}

extern "C" __global__ void bias_act_drop_bf8(f8* d, const uint4* a, const uint4* b, const float* bias, i64 n8, i64 cols,
                                             int relu, float p, float keep, u64 seed) {
  bias_act_drop_body8(d, a, b, bias, n8, cols, relu, p, keep, seed);
}

extern "C" __global__ void bias_act_drop_fb8(uint4* d, const f8* a, const f8* b, const float* bias, i64 n8, i64 cols,
                                             int relu, float p, float keep, u64 seed) {
  bias_act_drop_body8(d, a, b, bias, n8, cols, relu, p, keep, seed);
}

template <typename TI8, typename TO8>
__device__ __forceinline__ void act_drop_bwd_body8(TO8* dx, const TI8* y, const TI8* dy, i64 n8, int relu, float p,
                                                   float keep, u64 seed) {
  GRID_STRIDE(k, n8) {
    float yv[8], g[8];
    f8_unpack(as_f32(y[k]), yv);
    f8_unpack(as_f32(dy[k]), g);
    act_drop_grads8(yv, g, relu, p, keep, seed, k);
    store8(dx, k, f8_pack(g));
  }
}

extern "C" __global__ void act_drop_bwd_bb8(uint4* dx, const uint4* y, const uint4* dy, i64 n8, int relu, float p,
                                            float keep, u64 seed) {
  act_drop_bwd_body8(dx, y, dy, n8, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd_bf8(f8* dx, const uint4* y, const uint4* dy, i64 n8, int relu, float p,
                                            float keep, u64 seed) {
  act_drop_bwd_body8(dx, y, dy, n8, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd_fb8(uint4* dx, const f8* y, const f8* dy, i64 n8, int relu, float p, float keep,
                                            u64 seed) {
  act_drop_bwd_body8(dx, y, dy, n8, relu, p, keep, seed);
}

// act_drop_bwd_partial_body with 8 columns a thread: the grid's x counts
// blocks of 32 vectors (256 columns); each thread sums its 8 columns'
// rows r0 + threadIdx.y, + 8, ... in order, and the block adds the 8
// row classes of each column in order, as the one-column form does, so
// the partial sums are its bit for bit. cols8 = cols / 8.
template <typename TI8, typename TO8>
__device__ __forceinline__ void act_drop_bwd_partial_body8(TO8* dx, const TI8* y, const TI8* dy, i64 rows, i64 cols8,
                                                           i64 chunk, int relu, float p, float keep, u64 seed,
                                                           double* partial) {
  __shared__ double sh[8][33];
  i64 c8 = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double acc[8];
#pragma unroll
  for (int j = 0; j < 8; j++) acc[j] = 0.0;
  if (c8 < cols8)
    for (i64 r = r0 + threadIdx.y; r < r1; r += 8) {
      i64 k = r * cols8 + c8;
      float yv[8], g[8];
      f8_unpack(as_f32(y[k]), yv);
      f8_unpack(as_f32(dy[k]), g);
      act_drop_grads8(yv, g, relu, p, keep, seed, k);
      f8_unpack(store_get8(dx, k, f8_pack(g)), g);
#pragma unroll
      for (int j = 0; j < 8; j++) acc[j] += (double)g[j];
    }
  i64 cols = cols8 * 8;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    sh[threadIdx.y][threadIdx.x] = acc[j];
    __syncthreads();
    if (threadIdx.y == 0 && c8 < cols8) {
      double s = 0.0;
      for (int q = 0; q < 8; q++) s += sh[q][threadIdx.x];
      partial[(i64)blockIdx.y * cols + c8 * 8 + j] = s;
    }
    __syncthreads();
  }
}

extern "C" __global__ void act_drop_bwd_partial_bb8(uint4* dx, const uint4* y, const uint4* dy, i64 rows, i64 cols8,
                                                    i64 chunk, int relu, float p, float keep, u64 seed,
                                                    double* partial) {
  act_drop_bwd_partial_body8(dx, y, dy, rows, cols8, chunk, relu, p, keep, seed, partial);
}

extern "C" __global__ void act_drop_bwd_partial_bf8(f8* dx, const uint4* y, const uint4* dy, i64 rows, i64 cols8,
                                                    i64 chunk, int relu, float p, float keep, u64 seed,
                                                    double* partial) {
  act_drop_bwd_partial_body8(dx, y, dy, rows, cols8, chunk, relu, p, keep, seed, partial);
}

extern "C" __global__ void act_drop_bwd_partial_fb8(uint4* dx, const f8* y, const f8* dy, i64 rows, i64 cols8,
                                                    i64 chunk, int relu, float p, float keep, u64 seed,
                                                    double* partial) {
  act_drop_bwd_partial_body8(dx, y, dy, rows, cols8, chunk, relu, p, keep, seed, partial);
}

// The float32 wide forms (f8: 8 values, two float4, a thread), bit for
// bit the one-value kernels bias_act_drop, act_drop_bwd and
// act_drop_bwd_partial: 8 values a thread draw their dropout masks from
// two hashes instead of eight (rng.DropUniform).
extern "C" __global__ void bias_act_drop8(f8* d, const f8* a, const f8* b, const float* bias, i64 n8, i64 cols, int relu,
                                          float p, float keep, u64 seed) {
  bias_act_drop_body8(d, a, b, bias, n8, cols, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd8(f8* dx, const f8* y, const f8* dy, i64 n8, int relu, float p, float keep,
                                         u64 seed) {
  act_drop_bwd_body8(dx, y, dy, n8, relu, p, keep, seed);
}

extern "C" __global__ void act_drop_bwd_partial8(f8* dx, const f8* y, const f8* dy, i64 rows, i64 cols8, i64 chunk,
                                                 int relu, float p, float keep, u64 seed, double* partial) {
  act_drop_bwd_partial_body8(dx, y, dy, rows, cols8, chunk, relu, p, keep, seed, partial);
}
