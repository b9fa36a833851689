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
