// Feature loader routing (package gpucache): a batch's input IDs grouped
// by the device that serves each row, and the served rows put back in
// batch order. holder is a signed byte per node (-1: cold, read from host
// memory by the loader itself). Bins: 0..k-1 the serving device (cold
// rows in bin rank), k the cold rows, k+1 the IDs outside [0, rows).
// Mirrored on the host by hostMachine (machine.go).

#define GC_MAXB 160

// Pass 1: cnt[0..k+2) (zeroed) counts the bins; per block in shared
// memory, then one atomic per bin.
extern "C" __global__ void gc_route_count(i64* cnt, const int* ids, i64 n, const signed char* holder, i64 rows, int k,
                                          int rank) {
  __shared__ int hist[GC_MAXB];
  for (int t = threadIdx.x; t < k + 2; t += blockDim.x) hist[t] = 0;
  __syncthreads();
  GRID_STRIDE(i, n) {
    int v = ids[i];
    if (v < 0 || (i64)v >= rows) {
      atomicAdd(&hist[k + 1], 1);
      continue;
    }
    int h = holder[v];
    if (h < 0) {
      atomicAdd(&hist[k], 1);
      h = rank;
    }
    atomicAdd(&hist[h], 1);
  }
  __syncthreads();
  for (int t = threadIdx.x; t < k + 2; t += blockDim.x)
    if (hist[t]) atomicAdd((unsigned long long*)&cnt[t], (unsigned long long)hist[t]);
}

// Pass 2: ID i takes a slot in its bin's range of grouped: the rank's own
// range first, then the peers' in rank order (the send layout of the
// all-to-all-v). pos records i there. The order inside a range depends on
// scheduling; it does not matter, as pos puts every row back at its
// position. cur (k, zeroed) hands out the slots: per chunk of blockDim.x
// IDs, shared-memory ranks and one atomic per bin. Bad IDs get no slot.
extern "C" __global__ void gc_route_scatter(int* grouped, int* pos, i64* cur, const i64* cnt, const int* ids, i64 n,
                                            const signed char* holder, i64 rows, int k, int rank) {
  __shared__ int hist[GC_MAXB];
  __shared__ i64 start[GC_MAXB];
  __shared__ i64 base[GC_MAXB];
  if (threadIdx.x == 0) {
    start[rank] = 0;
    i64 s = cnt[rank];
    for (int p = 0; p < k; p++)
      if (p != rank) {
        start[p] = s;
        s += cnt[p];
      }
  }
  for (i64 c0 = (i64)blockIdx.x * blockDim.x; c0 < n; c0 += (i64)gridDim.x * blockDim.x) {
    for (int t = threadIdx.x; t < k; t += blockDim.x) hist[t] = 0;
    __syncthreads();
    i64 i = c0 + threadIdx.x;
    int v = 0, h = -1, r = 0;
    if (i < n) {
      v = ids[i];
      if (v >= 0 && (i64)v < rows) {
        h = holder[v];
        if (h < 0) h = rank;
        r = atomicAdd(&hist[h], 1);
      }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < k; t += blockDim.x)
      if (hist[t]) base[t] = start[t] + (i64)atomicAdd((unsigned long long*)&cur[t], (unsigned long long)hist[t]);
    __syncthreads();
    if (h >= 0) {
      i64 s = base[h] + r;
      grouped[s] = v;
      pos[s] = (int)i;
    }
    __syncthreads();
  }
}

// out[pos[j]] = in[j], rows of cols floats (every pos distinct). With
// p > 0 each value is also dropped out as backend.Dropout does: the value
// of output flat index e is kept iff rng.DropUniform(seed, e) >= p and
// then scaled by keep = 1/(1-p) (float32, from the host): drop_factor
// (common.cuh); the mask is not stored.
extern "C" __global__ void gc_scatter_rows(float* out, const float* in, const int* pos, i64 n, i64 cols, float p, float keep,
                                           u64 seed) {
  GRID_STRIDE(t, n * cols) {
    i64 j = t / cols, c = t - j * cols;
    i64 e = (i64)pos[j] * cols + c;
    out[e] = in[t] * drop_factor(p, keep, seed, e);
  }
}

// gc_scatter_rows with 16-byte moves (cols % 4 == 0, aligned buffers).
extern "C" __global__ void gc_scatter_rows4(float4* out, const float4* in, const int* pos, i64 n, i64 cols4, float p,
                                            float keep, u64 seed) {
  GRID_STRIDE(t, n * cols4) {
    i64 j = t / cols4, c = t - j * cols4;
    i64 e4 = (i64)pos[j] * cols4 + c;
    out[e4] = drop_scale4(in[t], p, keep, seed, e4 * 4);
  }
}

// gc_scatter_rows into a bfloat16 batch (cache.LoaderConfig.BFloat16Rows):
// each value scaled by its mask value as there, then rounded to nearest
// even (f32_to_bf16, common.cuh): what gc_scatter_rows followed by
// Convert writes, bit for bit.
extern "C" __global__ void gc_scatter_rows_bf16(bf16* out, const float* in, const int* pos, i64 n, i64 cols, float p,
                                                float keep, u64 seed) {
  GRID_STRIDE(t, n * cols) {
    i64 j = t / cols, c = t - j * cols;
    i64 e = (i64)pos[j] * cols + c;
    out[e] = f32_to_bf16(in[t] * drop_factor(p, keep, seed, e));
  }
}

// gc_scatter_rows_bf16 with 8 values a thread (cols % 8 == 0, out and in
// 16-byte aligned): two 16-byte loads of float32, one 16-byte store.
extern "C" __global__ void gc_scatter_rows_bf16x8(uint4* out, const f8* in, const int* pos, i64 n, i64 cols8, float p,
                                                  float keep, u64 seed) {
  GRID_STRIDE(t, n * cols8) {
    i64 j = t / cols8, c = t - j * cols8;
    i64 e8 = (i64)pos[j] * cols8 + c;
    f8 v = in[t];
    v.lo = drop_scale4(v.lo, p, keep, seed, e8 * 8);
    v.hi = drop_scale4(v.hi, p, keep, seed, e8 * 8 + 4);
    out[e8] = to_bf16(v);
  }
}
