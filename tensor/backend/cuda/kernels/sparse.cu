// Sparse kernels over a CSR view: ptr (rows+1), col (nnz), and edge ids
// eid (nnz, NULL when the edge id is the position itself, as in the
// untransposed matrix). Every output row is summed by one thread in edge
// order, so results are deterministic.

__device__ __forceinline__ i64 edge_id(const i64* eid, i64 p) { return eid ? eid[p] : p; }

// SpMM: one warp per output row, lanes over features. Each pass keeps up
// to 8 accumulators per lane (256 features), so widths up to 256 read the
// row's edges once.
extern "C" __global__ void spmm(float* out, const i64* ptr, const int* col, const i64* eid, const float* w,
                                const float* x, i64 rows, i64 width, i64 heads) {
  i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
  i64 dim = width / heads;
  for (i64 r = warp; r < rows; r += nwarps) {
    i64 p0 = ptr[r], p1 = ptr[r + 1];
    for (i64 fb = 0; fb < width; fb += 256) {
      float acc[8];
#pragma unroll
      for (int k = 0; k < 8; k++) acc[k] = 0.0f;
      for (i64 p = p0; p < p1; p++) {
        const float* xr = x + (i64)col[p] * width;
        if (w) {
          i64 e = edge_id(eid, p);
#pragma unroll
          for (int k = 0; k < 8; k++) {
            i64 f = fb + lane + 32 * k;
            if (f < width) acc[k] += w[e * heads + f / dim] * xr[f];
          }
        } else {
#pragma unroll
          for (int k = 0; k < 8; k++) {
            i64 f = fb + lane + 32 * k;
            if (f < width) acc[k] += xr[f];
          }
        }
      }
#pragma unroll
      for (int k = 0; k < 8; k++) {
        i64 f = fb + lane + 32 * k;
        if (f < width) out[r * width + f] = acc[k];
      }
    }
  }
}

// SDDMM: one thread per (edge, head). op 1: dot over dim; op 2: add.
extern "C" __global__ void sddmm(float* out, const i64* ptr, const int* col, const float* u, const float* v,
                                 i64 rows, i64 nnz, i64 heads, i64 dim, int op) {
  GRID_STRIDE(k, nnz * heads) {
    i64 e = k / heads, h = k - e * heads;
    i64 i = edge_row(ptr, rows, e);
    i64 j = col[e];
    i64 width = heads * dim;
    if (op == 2) {
      out[k] = u[i * heads + h] + v[j * heads + h];
    } else {
      const float* ur = u + i * width + h * dim;
      const float* vr = v + j * width + h * dim;
      float acc = 0.0f;
      for (i64 d = 0; d < dim; d++) acc += ur[d] * vr[d];
      out[k] = acc;
    }
  }
}

// EdgeSum: one thread per (row, head), edges in order.
extern "C" __global__ void edge_sum(float* out, const i64* ptr, const i64* eid, const float* e, i64 rows, i64 heads) {
  GRID_STRIDE(k, rows * heads) {
    i64 r = k / heads, h = k - r * heads;
    float acc = 0.0f;
    for (i64 p = ptr[r]; p < ptr[r + 1]; p++) acc += e[edge_id(eid, p) * heads + h];
    out[k] = acc;
  }
}

// EdgeSoftmax: one thread per (row, head); exponentials and their sum in
// double, as the CPU back end. out may alias scores.
extern "C" __global__ void edge_softmax(float* out, const i64* ptr, const float* s, i64 rows, i64 heads) {
  GRID_STRIDE(k, rows * heads) {
    i64 r = k / heads, h = k - r * heads;
    i64 p0 = ptr[r], p1 = ptr[r + 1];
    if (p0 == p1) continue;
    float m = s[p0 * heads + h];
    for (i64 p = p0; p < p1; p++) m = fmaxf(m, s[p * heads + h]);
    double sum = 0.0;
    for (i64 p = p0; p < p1; p++) {
      double x = exp((double)(s[p * heads + h] - m));
      out[p * heads + h] = (float)x;
      sum += x;
    }
    double inv = 1.0 / sum;
    for (i64 p = p0; p < p1; p++) out[p * heads + h] = (float)((double)out[p * heads + h] * inv);
  }
}

extern "C" __global__ void edge_softmax_backward(float* ds, const i64* ptr, const float* y, const float* dy, i64 rows,
                                                 i64 heads) {
  GRID_STRIDE(k, rows * heads) {
    i64 r = k / heads, h = k - r * heads;
    i64 p0 = ptr[r], p1 = ptr[r + 1];
    double dot = 0.0;
    for (i64 p = p0; p < p1; p++) dot += (double)y[p * heads + h] * (double)dy[p * heads + h];
    for (i64 p = p0; p < p1; p++) {
      i64 q = p * heads + h;
      ds[q] = (float)((double)y[q] * ((double)dy[q] - dot));
    }
  }
}

extern "C" __global__ void row_degree_inv(float* out, const i64* ptr, i64 rows) {
  GRID_STRIDE(r, rows) {
    i64 deg = ptr[r + 1] - ptr[r];
    out[r] = 1.0f / (float)(deg > 1 ? deg : 1);
  }
}

extern "C" __global__ void expand_rows_to_edges(float* out, const i64* ptr, const float* v, i64 rows, i64 nnz) {
  GRID_STRIDE(e, nnz) out[e] = v[edge_row(ptr, rows, e)];
}

// mean_edge_weights: every entry of row r gets 1/max(deg(r), 1) (as
// row_degree_inv then expand_rows_to_edges), a thread per row: for
// sampled blocks' short rows. mean_edge_weights_warp: a warp per row,
// for long rows.
extern "C" __global__ void mean_edge_weights(float* out, const i64* ptr, i64 rows) {
  GRID_STRIDE(r, rows) {
    i64 p0 = ptr[r], p1 = ptr[r + 1], deg = p1 - p0;
    float inv = 1.0f / (float)(deg > 1 ? deg : 1);
    for (i64 p = p0; p < p1; p++) out[p] = inv;
  }
}

extern "C" __global__ void mean_edge_weights_warp(float* out, const i64* ptr, i64 rows) {
  GRID_STRIDE(t, rows * 32) {
    i64 r = t >> 5;
    int lane = (int)(t & 31);
    i64 p0 = ptr[r], p1 = ptr[r + 1], deg = p1 - p0;
    float inv = 1.0f / (float)(deg > 1 ? deg : 1);
    for (i64 p = p0 + lane; p < p1; p += 32) out[p] = inv;
  }
}

// Transpose support: key[e] = col[e] (the bucket of edge e) and row[e].
extern "C" __global__ void csr_edge_rows(int* rows_of, const i64* ptr, i64 rows, i64 nnz) {
  GRID_STRIDE(e, nnz) rows_of[e] = (int)edge_row(ptr, rows, e);
}

// After a stable sort of edge ids by column: transposed entry q lists row
// rows_of[order[q]] and original edge id order[q].
extern "C" __global__ void csr_transpose_fill(int* trow, i64* teid, const int* order, const int* rows_of, i64 nnz) {
  GRID_STRIDE(q, nnz) {
    int e = order[q];
    trow[q] = rows_of[e];
    teid[q] = e;
  }
}

// AddSelfLoops, pass 1: the new length of every row (one more when the
// row lacks its diagonal entry); cnt[rows] = 0 so that an exclusive scan
// of rows+1 counts ends with the total.
extern "C" __global__ void self_loop_count(i64* cnt, const i64* ptr, const int* col, i64 rows) {
  GRID_STRIDE(r, rows + 1) {
    if (r == rows) {
      cnt[r] = 0;
      continue;
    }
    int has = 0;
    for (i64 p = ptr[r]; p < ptr[r + 1]; p++) has |= (col[p] == (int)r);
    cnt[r] = ptr[r + 1] - ptr[r] + (has ? 0 : 1);
  }
}

// AddSelfLoops, pass 2: copy each row and append the diagonal entry if
// it was missing.
extern "C" __global__ void self_loop_fill(int* ncol, const i64* nptr, const i64* ptr, const int* col, i64 rows) {
  GRID_STRIDE(r, rows) {
    i64 q = nptr[r];
    int has = 0;
    for (i64 p = ptr[r]; p < ptr[r + 1]; p++) {
      int c = col[p];
      has |= (c == (int)r);
      ncol[q++] = c;
    }
    if (!has) ncol[q] = (int)r;
  }
}

// GCN normalization per edge (i, j): 1/sqrt(max(indeg i,1) * max(outdeg
// j,1)) in double, as the host computes it; tptr holds the column
// pointers of the transpose.
extern "C" __global__ void gcn_norm(float* out, const i64* ptr, const int* col, const i64* tptr, i64 rows) {
  GRID_STRIDE(r, rows) {
    i64 p0 = ptr[r], p1 = ptr[r + 1];
    double in = (double)(p1 - p0 > 1 ? p1 - p0 : 1);
    for (i64 p = p0; p < p1; p++) {
      int j = col[p];
      i64 od = tptr[j + 1] - tptr[j];
      out[p] = (float)(1.0 / sqrt(in * (double)(od > 1 ? od : 1)));
    }
  }
}
