// Feature gathering with a hot/cold split: node v's row comes from the
// device cache (hot) when slot[v] >= 0, else from mapped pinned host
// memory (cold) read through UVA. 16-byte loads when cols % 4 == 0.

extern "C" __global__ void feat_gather(float* out, const int* nodes, i64 n, const int* slot, const float* hot,
                                       const float* cold, i64 nrows, i64 cols, u64* err) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    int v = nodes[i];
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = 0.0f;
      continue;
    }
    int s = slot ? slot[v] : -1;
    out[k] = s >= 0 ? hot[(i64)s * cols + c] : cold[(i64)v * cols + c];
  }
}

extern "C" __global__ void feat_gather4(float4* out, const int* nodes, i64 n, const int* slot, const float4* hot,
                                        const float4* cold, i64 nrows, i64 cols4, u64* err) {
  GRID_STRIDE(k, n * cols4) {
    i64 i = k / cols4, c = k - i * cols4;
    int v = nodes[i];
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      continue;
    }
    int s = slot ? slot[v] : -1;
    out[k] = s >= 0 ? hot[(i64)s * cols4 + c] : cold[(i64)v * cols4 + c];
  }
}

// The same two over a bfloat16 table (hot rows and host memory), widened
// to float32 exactly: half the bytes read. The x4 form reads four values
// (8 bytes) at a time.
extern "C" __global__ void feat_gather_bf16(float* out, const int* nodes, i64 n, const int* slot, const bf16* hot,
                                            const bf16* cold, i64 nrows, i64 cols, u64* err) {
  GRID_STRIDE(k, n * cols) {
    i64 i = k / cols, c = k - i * cols;
    int v = nodes[i];
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = 0.0f;
      continue;
    }
    int s = slot ? slot[v] : -1;
    out[k] = bf16_to_f32(s >= 0 ? hot[(i64)s * cols + c] : cold[(i64)v * cols + c]);
  }
}

extern "C" __global__ void feat_gather_bf16x4(float4* out, const int* nodes, i64 n, const int* slot, const uint2* hot,
                                              const uint2* cold, i64 nrows, i64 cols4, u64* err) {
  GRID_STRIDE(k, n * cols4) {
    i64 i = k / cols4, c = k - i * cols4;
    int v = nodes[i];
    if (v < 0 || v >= nrows) {
      if (c == 0) index_error(err, i);
      out[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      continue;
    }
    int s = slot ? slot[v] : -1;
    out[k] = bf16x4_to_f32x4(s >= 0 ? hot[(i64)s * cols4 + c] : cold[(i64)v * cols4 + c]);
  }
}
