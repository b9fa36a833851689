// Common definitions for Strata's CUDA kernels. NVRTC compiles these
// sources without system headers, so only built-in types are used.
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

#define GRID_STRIDE(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (i64)(n); i += (i64)blockDim.x * gridDim.x)

// rng_hash is internal/rng.Hash: the splitmix64 finalizer of
// seed ^ counter*golden, bit for bit.
__device__ __forceinline__ u64 rng_hash(u64 seed, u64 counter) {
  u64 z = seed ^ (counter * 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// rng_below is internal/rng.Below: floor(h*n / 2^64).
__device__ __forceinline__ u64 rng_below(u64 h, u64 n) { return __umul64hi(h, n); }

// index_error records that position pos of a checked index argument was
// out of range. The slot keeps the smallest such position, encoded as
// 2^62 - pos so that zero means "no error" and atomicMax finds the minimum.
__device__ __forceinline__ void index_error(u64* slot, i64 pos) {
  if (slot) atomicMax(slot, (u64)((1LL << 62) - pos));
}

// Row of edge e in a CSR with row pointers ptr[0..rows]: the last r with
// ptr[r] <= e (rows with no edges are skipped naturally).
__device__ __forceinline__ i64 edge_row(const i64* ptr, i64 rows, i64 e) {
  i64 lo = 0, hi = rows;  // invariant: ptr[lo] <= e < ptr[hi]
  while (hi - lo > 1) {
    i64 mid = (lo + hi) >> 1;
    if (ptr[mid] <= e) lo = mid; else hi = mid;
  }
  return lo;
}

// Deterministic block reduction of doubles over blockDim.x threads (a
// power of two <= 1024): a fixed tree in shared memory.
__device__ __forceinline__ double block_sum_double(double v, double* sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x >> 1; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max_float(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// bfloat16 as its 16-bit encoding (NVRTC runs without system headers, so
// no cuda_bf16.h): package backend's BF16Value and BF16Bits bit for bit
// (round to nearest, ties to even; NaN stays a quiet NaN).
typedef unsigned short bf16;

__device__ __forceinline__ float bf16_to_f32(bf16 h) { return __uint_as_float((u32)h << 16); }

__device__ __forceinline__ bf16 f32_to_bf16(float x) {
  u32 b = __float_as_uint(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (bf16)((b | 0x00400000u) >> 16);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (bf16)(b >> 16);
}

// Four bfloat16 values packed in a uint2 (little-endian: element 0 in the
// low half of .x) widened to a float4.
__device__ __forceinline__ float4 bf16x4_to_f32x4(uint2 v) {
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xffff0000u));
}

// as_f32 widens a gathered value to float32 exactly: float32 as it is,
// bfloat16 (one, or four packed in a uint2) by bf16_to_f32. The gather
// kernels' bodies are written once over the value type with it.
__device__ __forceinline__ float as_f32(float v) { return v; }
__device__ __forceinline__ float as_f32(bf16 v) { return bf16_to_f32(v); }
__device__ __forceinline__ float4 as_f32(float4 v) { return v; }
__device__ __forceinline__ float4 as_f32(uint2 v) { return bf16x4_to_f32x4(v); }

// drop_quarter is the mask value whose draw is quarter j of the hash h:
// keep when its 16 bits over 2^16 are >= p, else 0.
__device__ __forceinline__ float drop_quarter(u64 h, int j, float p, float keep) {
  return (float)((u32)(h >> (16 * j)) & 0xffffu) * (1.0f / 65536.0f) >= p ? keep : 0.0f;
}

// drop_factor is backend.Dropout's mask value of flat element i: keep
// (1/(1-p), computed on the host in float32) when rng.DropUniform(seed,
// i) >= p (quarter i%4 of rng_hash(seed, i/4)), else 0; 1 when p == 0 (no
// dropout). Kernels that apply dropout as they write (backend.Fused, the
// feature gathers) regenerate the mask with it instead of storing one.
__device__ __forceinline__ float drop_factor(float p, float keep, u64 seed, i64 i) {
  if (p == 0.0f) return 1.0f;
  return drop_quarter(rng_hash(seed, (u64)i >> 2), (int)(i & 3), p, keep);
}

// drop_factors4 is drop_factor of elements i0 .. i0+3 (i0 % 4 == 0): one
// hash for the four.
__device__ __forceinline__ float4 drop_factors4(float p, float keep, u64 seed, i64 i0) {
  if (p == 0.0f) return make_float4(1.0f, 1.0f, 1.0f, 1.0f);
  u64 h = rng_hash(seed, (u64)i0 >> 2);
  return make_float4(drop_quarter(h, 0, p, keep), drop_quarter(h, 1, p, keep), drop_quarter(h, 2, p, keep),
                     drop_quarter(h, 3, p, keep));
}

// drop_scale4 is v times the mask values of elements i0 .. i0+3 (i0 % 4
// == 0); v as it is when p == 0.
__device__ __forceinline__ float4 drop_scale4(float4 v, float p, float keep, u64 seed, i64 i0) {
  if (p == 0.0f) return v;
  float4 f = drop_factors4(p, keep, seed, i0);
  return make_float4(v.x * f.x, v.y * f.y, v.z * f.z, v.w * f.w);
}

// ---- bfloat16 activations (backend.BF16Activations): kernels widen on
// read (as_f32), compute in float32 and round once on store (to_bf16),
// as the CPU back end emulates. Vectors: 4 values in a uint2 (8 bytes,
// widened to a float4) and 8 in a uint4 (16 bytes, as a float4 of
// float32 is, widened to an f8).
struct f8 {
  float4 lo, hi;
};

__device__ __forceinline__ f8 as_f32(uint4 v) {
  f8 r;
  r.lo = bf16x4_to_f32x4(make_uint2(v.x, v.y));
  r.hi = bf16x4_to_f32x4(make_uint2(v.z, v.w));
  return r;
}
__device__ __forceinline__ f8 as_f32(f8 v) { return v; }

// pack2_bf16 rounds two floats into one u32 (element 0 in the low half).
__device__ __forceinline__ u32 pack2_bf16(float a, float b) {
  return (u32)f32_to_bf16(a) | ((u32)f32_to_bf16(b) << 16);
}

// to_bf16 rounds a float32 value or vector to its bfloat16 storage form;
// bfloat16 forms pass through unchanged (a copy of stored values).
__device__ __forceinline__ bf16 to_bf16(float v) { return f32_to_bf16(v); }
__device__ __forceinline__ uint2 to_bf16(float4 v) { return make_uint2(pack2_bf16(v.x, v.y), pack2_bf16(v.z, v.w)); }
__device__ __forceinline__ uint4 to_bf16(f8 v) {
  uint2 a = to_bf16(v.lo), b = to_bf16(v.hi);
  return make_uint4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ bf16 to_bf16(bf16 v) { return v; }
__device__ __forceinline__ uint2 to_bf16(uint2 v) { return v; }
__device__ __forceinline__ uint4 to_bf16(uint4 v) { return v; }

// store_as writes a float32 value into a float (as is) or bfloat16
// (rounded) element: fused kernels are written once over their output
// type with it.
__device__ __forceinline__ void store_as(float* d, i64 i, float v) { d[i] = v; }
__device__ __forceinline__ void store_as(bf16* d, i64 i, float v) { d[i] = f32_to_bf16(v); }

// ---- 8 values a thread (the wide forms of the bfloat16 elementwise
// kernels: 16 bytes of bfloat16, or 32 of float32, per access). f8_unpack
// and f8_pack move an f8 to and from an array the unrolled loops index
// (registers after unrolling); store8 writes an f8 as d's element type
// (uint4: rounded to bfloat16; f8: as it is), store_get8 also returns
// what was stored, widened (store_get's form).
__device__ __forceinline__ void f8_unpack(f8 x, float* o) {
  o[0] = x.lo.x; o[1] = x.lo.y; o[2] = x.lo.z; o[3] = x.lo.w;
  o[4] = x.hi.x; o[5] = x.hi.y; o[6] = x.hi.z; o[7] = x.hi.w;
}

__device__ __forceinline__ f8 f8_pack(const float* o) {
  f8 r;
  r.lo = make_float4(o[0], o[1], o[2], o[3]);
  r.hi = make_float4(o[4], o[5], o[6], o[7]);
  return r;
}

__device__ __forceinline__ void store8(uint4* d, i64 k, f8 v) { d[k] = to_bf16(v); }
__device__ __forceinline__ void store8(f8* d, i64 k, f8 v) { d[k] = v; }

__device__ __forceinline__ f8 store_get8(uint4* d, i64 k, f8 v) {
  uint4 h = to_bf16(v);
  d[k] = h;
  return as_f32(h);
}
__device__ __forceinline__ f8 store_get8(f8* d, i64 k, f8 v) {
  d[k] = v;
  return v;
}
