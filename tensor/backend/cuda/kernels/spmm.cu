// SpMM for one head (w nnz x 1 or NULL): spmm1g runs G lanes per output
// row (G = 32: one warp; G < 32: 32/G rows per warp),
// several rows per block, no grid stride, so the block scheduler balances
// rows of very different degrees. A row's lanes read its column indices
// (and weights) 32 (G) at a time with one coalesced load each and hand
// them to each other with shuffles; every lane then loads its columns of
// U source rows at once (U*NV loads in flight) and adds them in edge
// order. Each output element is therefore the same in-order sum as the
// generic spmm kernel computes, acc = fma(w_e, x_e, acc) (w_e = 1 without
// weights, which adds x_e exactly), so results are bit-identical to it.
//
// float4 versions need x and out 16-byte aligned and width % 4 == 0 (wd
// = width/4); float versions take any width. Lane l of a row holds the
// columns l, l+G, ... (NV of them) of a G*NV-wide slice; wider rows are
// covered slice by slice (the indices are read again). spmm1g's PF loads
// the next chunk of indices before the current one is used; with G < 32
// the rows of a warp run as many chunks as the longest of them: good when
// neighboring rows have similar lengths (nodes ordered by degree), and for
// narrow rows, where one row alone leaves a warp's loads too small.
//
// The instances and when each is used (BenchmarkSpMMVariants measured
// them on the products graph) are listed at the end and in sparse.go.

template <typename T> struct Acc;
template <> struct Acc<float> {
  static __device__ __forceinline__ float zero() { return 0.0f; }
  static __device__ __forceinline__ void fma(float& a, float w, const float& x) { a = fmaf(w, x, a); }
};
template <> struct Acc<float4> {
  static __device__ __forceinline__ float4 zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  static __device__ __forceinline__ void fma(float4& a, float w, const float4& x) {
    a.x = fmaf(w, x.x, a.x);
    a.y = fmaf(w, x.y, a.y);
    a.z = fmaf(w, x.z, a.z);
    a.w = fmaf(w, x.w, a.w);
  }
};

template <typename T, int G, int NV, int U, bool PF>
__device__ __forceinline__ void spmm1g(T* __restrict__ out, const i64* __restrict__ ptr, const int* __restrict__ col,
                                      const i64* __restrict__ eid, const float* __restrict__ w, const T* __restrict__ x,
                                      i64 rows, i64 wd, i64 ldo, const T* __restrict__ self) {
  const unsigned full = 0xffffffffu;
  int lane = threadIdx.x & 31;
  int gl = lane % G;
  i64 r = ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 / G) + lane / G;
  bool live = r < rows;
  i64 p0 = 0;
  int n = 0;
  if (live) {
    p0 = ptr[r];
    n = (int)(ptr[r + 1] - p0);
  }
  int maxn = G == 32 ? n : (int)__reduce_max_sync(full, (unsigned)n);
  if (G == 32 && !live) return;  // a whole warp past the end (no shuffles follow)
  for (i64 fb = 0; fb < wd; fb += (i64)G * NV) {
    T acc[NV];
    bool on[NV];
#pragma unroll
    for (int k = 0; k < NV; k++) {
      acc[k] = Acc<T>::zero();
      on[k] = live && fb + gl + G * k < wd;
    }
    const T* xs = x + fb + gl;
    int c = 0;
    float we = 0.f;
    if (PF && gl < n) {
      c = col[p0 + gl];
      we = w ? w[edge_id(eid, p0 + gl)] : 1.0f;
    }
    for (int base = 0; base < maxn; base += G) {
      int cnt = n - base;  // this row's edges left (may be <= 0)
      if (!PF) {
        c = 0;
        we = 0.f;
        if (gl < cnt) {
          c = col[p0 + base + gl];
          we = w ? w[edge_id(eid, p0 + base + gl)] : 1.0f;
        }
      }
      int cc = c;
      float ww = we;
      if (PF) {
        c = 0;
        we = 0.f;
        if (gl < cnt - G) {
          c = col[p0 + base + G + gl];
          we = w ? w[edge_id(eid, p0 + base + G + gl)] : 1.0f;
        }
      }
      int jmax = maxn - base < G ? maxn - base : G;
      int j = 0;
      for (; j + U <= jmax; j += U) {
        T v[U][NV];
        float wu[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
          int cu = __shfl_sync(full, cc, j + u, G);
          wu[u] = __shfl_sync(full, ww, j + u, G);
          ok[u] = G == 32 || j + u < cnt;  // G == 32: jmax <= cnt
          const T* xr = xs + (i64)cu * wd;
#pragma unroll
          for (int k = 0; k < NV; k++)
            if (on[k] && ok[u]) v[u][k] = xr[G * k];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
          for (int k = 0; k < NV; k++)
            if (on[k] && ok[u]) Acc<T>::fma(acc[k], wu[u], v[u][k]);
        }
      }
      for (; j < jmax; j++) {
        int cu = __shfl_sync(full, cc, j, G);
        float wj = __shfl_sync(full, ww, j, G);
        bool okj = G == 32 || j < cnt;
        const T* xr = xs + (i64)cu * wd;
#pragma unroll
        for (int k = 0; k < NV; k++)
          if (on[k] && okj) Acc<T>::fma(acc[k], wj, xr[G * k]);
      }
    }
    T* o = out + r * ldo + fb + gl;
    if (self) {
      const T* sr = self + r * wd + fb + gl;
#pragma unroll
      for (int k = 0; k < NV; k++)
        if (on[k]) o[G * k] = sr[G * k];
      o += wd;
    }
#pragma unroll
    for (int k = 0; k < NV; k++)
      if (on[k]) o[G * k] = acc[k];
  }
}

// Instances. Arguments: out, ptr, col, eid, w, x, rows, wd (width in
// float4 or float units), ldo (out's row stride, in the same units: wd
// for a matrix of its own), self (nil, or x: row r's first wd values of
// out are self's row r, the sums follow them: a SAGE layer's input
// [x_dst | mean of x over the in-edges] for one product).

// width <= 128: one warp per row, NV=1, U=8.
extern "C" __global__ void spmm1_v1(float4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float4* x,
                                 i64 rows, i64 wd, i64 ldo, const float4* self) {
  spmm1g<float4, 32, 1, 8, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 128, rows of similar length: G=16, NV=2, U=8, indices ahead.
extern "C" __global__ void spmm1_v2g(float4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float4* x,
                                 i64 rows, i64 wd, i64 ldo, const float4* self) {
  spmm1g<float4, 16, 2, 8, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 128, short rows (a sampled block's, at most its fanout's
// edges, 16 or fewer on average): G=16, NV=2, U=2, indices ahead; a row of
// 5 edges keeps its loads in flight instead of one by one in U=8's tail.
extern "C" __global__ void spmm1_v2s(float4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float4* x,
                                 i64 rows, i64 wd, i64 ldo, const float4* self) {
  spmm1g<float4, 16, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 256: G=32, NV=2, U=2, indices ahead.
extern "C" __global__ void spmm1_v2(float4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float4* x,
                                 i64 rows, i64 wd, i64 ldo, const float4* self) {
  spmm1g<float4, 32, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// wider: one warp per row, NV=4, U=2.
extern "C" __global__ void spmm1_v4(float4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float4* x,
                                 i64 rows, i64 wd, i64 ldo, const float4* self) {
  spmm1g<float4, 32, 4, 2, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 32: G=8, NV=4, U=4, indices ahead.
extern "C" __global__ void spmm1_s4g(float* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float* x,
                                 i64 rows, i64 wd, i64 ldo, const float* self) {
  spmm1g<float, 8, 4, 4, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 48: G=8, NV=6, U=4, indices ahead.
extern "C" __global__ void spmm1_s6g(float* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float* x,
                                 i64 rows, i64 wd, i64 ldo, const float* self) {
  spmm1g<float, 8, 6, 4, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 64: one warp per row, NV=2, U=8.
extern "C" __global__ void spmm1_s2(float* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float* x,
                                 i64 rows, i64 wd, i64 ldo, const float* self) {
  spmm1g<float, 32, 2, 8, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// width <= 128: one warp per row, NV=4, U=4.
extern "C" __global__ void spmm1_s4(float* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float* x,
                                 i64 rows, i64 wd, i64 ldo, const float* self) {
  spmm1g<float, 32, 4, 4, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// wider: one warp per row, NV=8, U=2.
extern "C" __global__ void spmm1_s8(float* out, const i64* ptr, const int* col, const i64* eid, const float* w, const float* x,
                                 i64 rows, i64 wd, i64 ldo, const float* self) {
  spmm1g<float, 32, 8, 2, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

// ---- bfloat16 x and out (backend.BF16Activations): spmm1gb is spmm1g
// with x and out stored as L (bf16, or 4 of them in a uint2, or 8 in a
// uint4) and the sums kept in float32 as A (float, float4, f8): each
// value is widened as it is loaded and the sum rounded once, on store.
// The sums are spmm1g's, in the same order.
template <> struct Acc<f8> {
  static __device__ __forceinline__ f8 zero() {
    f8 r;
    r.lo = make_float4(0.f, 0.f, 0.f, 0.f);
    r.hi = r.lo;
    return r;
  }
  static __device__ __forceinline__ void fma(f8& a, float w, const f8& x) {
    Acc<float4>::fma(a.lo, w, x.lo);
    Acc<float4>::fma(a.hi, w, x.hi);
  }
};

template <typename L, typename A, int G, int NV, int U, bool PF>
__device__ __forceinline__ void spmm1gb(L* __restrict__ out, const i64* __restrict__ ptr, const int* __restrict__ col,
                                       const i64* __restrict__ eid, const float* __restrict__ w, const L* __restrict__ x,
                                       i64 rows, i64 wd, i64 ldo, const L* __restrict__ self) {
  const unsigned full = 0xffffffffu;
  int lane = threadIdx.x & 31;
  int gl = lane % G;
  i64 r = ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 / G) + lane / G;
  bool live = r < rows;
  i64 p0 = 0;
  int n = 0;
  if (live) {
    p0 = ptr[r];
    n = (int)(ptr[r + 1] - p0);
  }
  int maxn = G == 32 ? n : (int)__reduce_max_sync(full, (unsigned)n);
  if (G == 32 && !live) return;
  for (i64 fb = 0; fb < wd; fb += (i64)G * NV) {
    A acc[NV];
    bool on[NV];
#pragma unroll
    for (int k = 0; k < NV; k++) {
      acc[k] = Acc<A>::zero();
      on[k] = live && fb + gl + G * k < wd;
    }
    const L* xs = x + fb + gl;
    int c = 0;
    float we = 0.f;
    if (PF && gl < n) {
      c = col[p0 + gl];
      we = w ? w[edge_id(eid, p0 + gl)] : 1.0f;
    }
    for (int base = 0; base < maxn; base += G) {
      int cnt = n - base;
      if (!PF) {
        c = 0;
        we = 0.f;
        if (gl < cnt) {
          c = col[p0 + base + gl];
          we = w ? w[edge_id(eid, p0 + base + gl)] : 1.0f;
        }
      }
      int cc = c;
      float ww = we;
      if (PF) {
        c = 0;
        we = 0.f;
        if (gl < cnt - G) {
          c = col[p0 + base + G + gl];
          we = w ? w[edge_id(eid, p0 + base + G + gl)] : 1.0f;
        }
      }
      int jmax = maxn - base < G ? maxn - base : G;
      int j = 0;
      for (; j + U <= jmax; j += U) {
        L v[U][NV];
        float wu[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
          int cu = __shfl_sync(full, cc, j + u, G);
          wu[u] = __shfl_sync(full, ww, j + u, G);
          ok[u] = G == 32 || j + u < cnt;
          const L* xr = xs + (i64)cu * wd;
#pragma unroll
          for (int k = 0; k < NV; k++)
            if (on[k] && ok[u]) v[u][k] = xr[G * k];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
          for (int k = 0; k < NV; k++)
            if (on[k] && ok[u]) Acc<A>::fma(acc[k], wu[u], as_f32(v[u][k]));
        }
      }
      for (; j < jmax; j++) {
        int cu = __shfl_sync(full, cc, j, G);
        float wj = __shfl_sync(full, ww, j, G);
        bool okj = G == 32 || j < cnt;
        const L* xr = xs + (i64)cu * wd;
#pragma unroll
        for (int k = 0; k < NV; k++)
          if (on[k] && okj) Acc<A>::fma(acc[k], wj, as_f32(xr[G * k]));
      }
    }
    L* o = out + r * ldo + fb + gl;
    if (self) {
      const L* sr = self + r * wd + fb + gl;
#pragma unroll
      for (int k = 0; k < NV; k++)
        if (on[k]) o[G * k] = sr[G * k];
      o += wd;
    }
#pragma unroll
    for (int k = 0; k < NV; k++)
      if (on[k]) o[G * k] = to_bf16(acc[k]);
  }
}

// Instances: spmm1's, by the same shapes (sparse.go's spmm1BF16 picks
// them as spmm1Kernel does for the same number of vectors a row), on 8
// values a lane (_b8: uint4), 4 (_b4: uint2) or one (_b1).
extern "C" __global__ void spmm1_v1_b8(uint4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint4* x,
                                  i64 rows, i64 wd, i64 ldo, const uint4* self) {
  spmm1gb<uint4, f8, 32, 1, 8, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2g_b8(uint4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint4* x,
                                  i64 rows, i64 wd, i64 ldo, const uint4* self) {
  spmm1gb<uint4, f8, 16, 2, 8, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2s_b8(uint4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint4* x,
                                  i64 rows, i64 wd, i64 ldo, const uint4* self) {
  spmm1gb<uint4, f8, 16, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2_b8(uint4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint4* x,
                                  i64 rows, i64 wd, i64 ldo, const uint4* self) {
  spmm1gb<uint4, f8, 32, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v4_b8(uint4* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint4* x,
                                  i64 rows, i64 wd, i64 ldo, const uint4* self) {
  spmm1gb<uint4, f8, 32, 4, 2, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v1_b4(uint2* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint2* x,
                                  i64 rows, i64 wd, i64 ldo, const uint2* self) {
  spmm1gb<uint2, float4, 32, 1, 8, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2g_b4(uint2* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint2* x,
                                  i64 rows, i64 wd, i64 ldo, const uint2* self) {
  spmm1gb<uint2, float4, 16, 2, 8, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2s_b4(uint2* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint2* x,
                                  i64 rows, i64 wd, i64 ldo, const uint2* self) {
  spmm1gb<uint2, float4, 16, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v2_b4(uint2* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint2* x,
                                  i64 rows, i64 wd, i64 ldo, const uint2* self) {
  spmm1gb<uint2, float4, 32, 2, 2, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_v4_b4(uint2* out, const i64* ptr, const int* col, const i64* eid, const float* w, const uint2* x,
                                  i64 rows, i64 wd, i64 ldo, const uint2* self) {
  spmm1gb<uint2, float4, 32, 4, 2, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_s4g_b1(bf16* out, const i64* ptr, const int* col, const i64* eid, const float* w, const bf16* x,
                                  i64 rows, i64 wd, i64 ldo, const bf16* self) {
  spmm1gb<bf16, float, 8, 4, 4, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_s6g_b1(bf16* out, const i64* ptr, const int* col, const i64* eid, const float* w, const bf16* x,
                                  i64 rows, i64 wd, i64 ldo, const bf16* self) {
  spmm1gb<bf16, float, 8, 6, 4, true>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_s2_b1(bf16* out, const i64* ptr, const int* col, const i64* eid, const float* w, const bf16* x,
                                  i64 rows, i64 wd, i64 ldo, const bf16* self) {
  spmm1gb<bf16, float, 32, 2, 8, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_s4_b1(bf16* out, const i64* ptr, const int* col, const i64* eid, const float* w, const bf16* x,
                                  i64 rows, i64 wd, i64 ldo, const bf16* self) {
  spmm1gb<bf16, float, 32, 4, 4, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}

extern "C" __global__ void spmm1_s8_b1(bf16* out, const i64* ptr, const int* col, const i64* eid, const float* w, const bf16* x,
                                  i64 rows, i64 wd, i64 ldo, const bf16* self) {
  spmm1gb<bf16, float, 32, 8, 2, false>(out, ptr, col, eid, w, x, rows, wd, ldo, self);
}
