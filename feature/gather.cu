// Feature gathering with a hot/cold split: node v's row comes from the
// device cache (hot) when slot[v] >= 0, else from mapped pinned host
// memory (cold) read through UVA. 16-byte loads when cols % 4 == 0.
// The table may be a machine's shard (package dsp/machines): it holds
// nodes lo .. lo+nrows-1 (v - lo indexes slot and cold), and spos, when
// not null, gives each batch position's row of staged (float32, pinned,
// rows fetched from other machines; -1: the shard's row), bounded by
// nstaged; spos[i] = -2 - j names extra row j (of nextra), a row of
// another machine kept in device memory after the hot rows (hot row
// nhot + j). Indices are 64-bit; a bad one zeroes its row and is reported.
// With p > 0 the gather also applies input dropout: output element k
// (flat index) is kept iff rng.DropUniform(seed, k) >= p and then scaled by
// keep = 1/(1-p) (float32, from the host), backend.Dropout's rule, so no
// separate pass over the gathered rows and no mask.

// feat_scale is v times its dropout mask value (drop_factor, common.cuh);
// the float4 form scales the four values of vector k4 (elements 4*k4 ...)
// and leaves v as it is when p == 0.
__device__ __forceinline__ float feat_scale(float v, float p, float keep, u64 seed, i64 k) {
  return v * drop_factor(p, keep, seed, k);
}

__device__ __forceinline__ float4 feat_scale(float4 v, float p, float keep, u64 seed, i64 k4) {
  return drop_scale4(v, p, keep, seed, k4 * 4);
}

// feat_gather_body is the one body of the four kernels below: Out is
// float, or float4 for four values a thread (cols then counts vectors);
// In, the table's values, float or bf16 (float4 or uint2), widened
// exactly by as_f32 (common.cuh); staged rows are float32.
template <typename Out, typename In>
__device__ __forceinline__ void feat_gather_body(Out* out, const int* nodes, i64 n, const int* slot, const In* hot,
                                                 const In* cold, i64 nrows, i64 cols, u64* err, float p, float keep,
                                                 u64 seed, i64 lo, const int* spos, const Out* staged, i64 nstaged,
                                                 i64 nhot, i64 nextra) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    i64 sp = spos ? (i64)spos[i] : -1;
    if (sp >= 0) {
      if (sp >= nstaged) {
        if (c == 0) index_error(err, i);
        out[k] = Out();
        continue;
      }
      out[k] = feat_scale(staged[sp * cols + c], p, keep, seed, k);
      continue;
    }
    if (sp < -1) {
      i64 j = -2 - sp;
      if (j >= nextra) {
        if (c == 0) index_error(err, i);
        out[k] = Out();
        continue;
      }
      out[k] = feat_scale(as_f32(hot[(nhot + j) * cols + c]), p, keep, seed, k);
      continue;
    }
    i64 v = (i64)nodes[i] - lo;
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = Out();
      continue;
    }
    int s = slot ? slot[v] : -1;
    if (s < 0 && cold == nullptr) {  // no host table (Options.NoHost): only hot rows
      if (c == 0) index_error(err, i);
      out[k] = Out();
      continue;
    }
    out[k] = feat_scale(as_f32(s >= 0 ? hot[(i64)s * cols + c] : cold[(i64)v * cols + c]), p, keep, seed, k);
  }
}

extern "C" __global__ void feat_gather(float* out, const int* nodes, i64 n, const int* slot, const float* hot,
                                       const float* cold, i64 nrows, i64 cols, u64* err, float p, float keep, u64 seed,
                                       i64 lo, const int* spos, const float* staged, i64 nstaged, i64 nhot,
                                       i64 nextra) {
  feat_gather_body(out, nodes, n, slot, hot, cold, nrows, cols, err, p, keep, seed, lo, spos, staged, nstaged, nhot, nextra);
}

extern "C" __global__ void feat_gather4(float4* out, const int* nodes, i64 n, const int* slot, const float4* hot,
                                        const float4* cold, i64 nrows, i64 cols4, u64* err, float p, float keep, u64 seed,
                                        i64 lo, const int* spos, const float4* staged, i64 nstaged, i64 nhot,
                                              i64 nextra) {
  feat_gather_body(out, nodes, n, slot, hot, cold, nrows, cols4, err, p, keep, seed, lo, spos, staged, nstaged, nhot, nextra);
}

// The same two over a bfloat16 table (hot rows and host memory), widened
// to float32 exactly: half the bytes read. The x4 form reads four values
// (8 bytes) at a time.
extern "C" __global__ void feat_gather_bf16(float* out, const int* nodes, i64 n, const int* slot, const bf16* hot,
                                            const bf16* cold, i64 nrows, i64 cols, u64* err, float p, float keep, u64 seed,
                                            i64 lo, const int* spos, const float* staged, i64 nstaged, i64 nhot,
                                            i64 nextra) {
  feat_gather_body(out, nodes, n, slot, hot, cold, nrows, cols, err, p, keep, seed, lo, spos, staged, nstaged, nhot, nextra);
}

extern "C" __global__ void feat_gather_bf16x4(float4* out, const int* nodes, i64 n, const int* slot, const uint2* hot,
                                              const uint2* cold, i64 nrows, i64 cols4, u64* err, float p, float keep, u64 seed,
                                              i64 lo, const int* spos, const float4* staged, i64 nstaged, i64 nhot,
                                              i64 nextra) {
  feat_gather_body(out, nodes, n, slot, hot, cold, nrows, cols4, err, p, keep, seed, lo, spos, staged, nstaged, nhot, nextra);
}

// ---- Into a bfloat16 batch (a trainer with bfloat16 activations): from
// a bfloat16 table only. Each value is widened exactly, scaled by its
// mask value as above and rounded to nearest even once (to_bf16,
// common.cuh): what the float32 gather followed by Convert writes, bit
// for bit (the table's values themselves when p == 0). Staged rows are
// float32 (float, or an f8 of 8 values).

__device__ __forceinline__ f8 feat_scale(f8 v, float p, float keep, u64 seed, i64 k8) {
  if (p == 0.0f) return v;
  v.lo = feat_scale(v.lo, p, keep, seed, 2 * k8);  // elements 8*k8 ... 8*k8+3
  v.hi = feat_scale(v.hi, p, keep, seed, 2 * k8 + 1);
  return v;
}

// feat_gather_half_body is feat_gather_body writing Out (bf16, or uint4
// for 8 values a thread: cols then counts vectors of 8) from In (bf16 or
// uint4) and staged rows St (float or f8).
template <typename Out, typename In, typename St>
__device__ __forceinline__ void feat_gather_half_body(Out* out, const int* nodes, i64 n, const int* slot, const In* hot,
                                                      const In* cold, i64 nrows, i64 cols, u64* err, float p,
                                                      float keep, u64 seed, i64 lo, const int* spos, const St* staged,
                                                      i64 nstaged, i64 nhot, i64 nextra) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    i64 sp = spos ? (i64)spos[i] : -1;
    if (sp >= 0) {
      if (sp >= nstaged) {
        if (c == 0) index_error(err, i);
        out[k] = Out();
        continue;
      }
      out[k] = to_bf16(feat_scale(as_f32(staged[sp * cols + c]), p, keep, seed, k));
      continue;
    }
    if (sp < -1) {
      i64 j = -2 - sp;
      if (j >= nextra) {
        if (c == 0) index_error(err, i);
        out[k] = Out();
        continue;
      }
      out[k] = to_bf16(feat_scale(as_f32(hot[(nhot + j) * cols + c]), p, keep, seed, k));
      continue;
    }
    i64 v = (i64)nodes[i] - lo;
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = Out();
      continue;
    }
    int s = slot ? slot[v] : -1;
    if (s < 0 && cold == nullptr) {  // no host table (Options.NoHost): only hot rows
      if (c == 0) index_error(err, i);
      out[k] = Out();
      continue;
    }
    out[k] = to_bf16(feat_scale(as_f32(s >= 0 ? hot[(i64)s * cols + c] : cold[(i64)v * cols + c]), p, keep, seed, k));
  }
}

extern "C" __global__ void feat_gather_b2b(bf16* out, const int* nodes, i64 n, const int* slot, const bf16* hot,
                                           const bf16* cold, i64 nrows, i64 cols, u64* err, float p, float keep, u64 seed,
                                           i64 lo, const int* spos, const float* staged, i64 nstaged, i64 nhot,
                                           i64 nextra) {
  feat_gather_half_body(out, nodes, n, slot, hot, cold, nrows, cols, err, p, keep, seed, lo, spos, staged, nstaged, nhot,
                        nextra);
}

// 8 values (16 bytes of bfloat16) a thread: cols % 8 == 0, out 16-byte
// aligned and the staged rows too.
extern "C" __global__ void feat_gather_b2b8(uint4* out, const int* nodes, i64 n, const int* slot, const uint4* hot,
                                            const uint4* cold, i64 nrows, i64 cols8, u64* err, float p, float keep,
                                            u64 seed, i64 lo, const int* spos, const f8* staged, i64 nstaged, i64 nhot,
                                            i64 nextra) {
  feat_gather_half_body(out, nodes, n, slot, hot, cold, nrows, cols8, err, p, keep, seed, lo, spos, staged, nstaged, nhot,
                        nextra);
}
