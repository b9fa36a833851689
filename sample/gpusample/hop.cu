// Segmented draws for collective samplers (package dsp/gpucsp): the n
// destinations are split into segments [segoff[s], segoff[s+1]), each
// drawn under its own hop key segkey[s] (the requester's), in one pass
// with the same per-destination rules as gs_sample.
extern "C" __global__ void gs_sample_seg(i64* eid, int* src, double* kscr, const i64* ptr, const int* dst, i64 n,
                                         const i64* indptr, const int* indices, const double* cum, const float* w,
                                         const int* posdeg, int k, int replace, int weighted, const i64* segoff,
                                         const u64* segkey, int nseg, const i64* dpos, const int* didx) {
  GRID_STRIDE(i, n) {
    int s = 0;
    while (s + 1 < nseg && segoff[s + 1] <= i) s++;
    gs_draw(i, eid, src, kscr, ptr, dst, indptr, indices, cum, w, posdeg, k, replace, weighted, segkey[s], dpos, didx);
  }
}

// Strided draws for collective samplers: destination i's draws go to
// slots [i*k, i*k + m) of eid/src (k > 0 the fanout, m = gs_row_count),
// and slots [i*k + m, (i+1)*k) get -1, so a requester learns each count
// from the padding and needs no totals. Segments as in gs_sample_seg:
// seg holds nseg+1 offsets, then the nseg hop keys. eid gets global edge
// ids (positions plus edgebase).
extern "C" __global__ void gs_sample_stride(i64* eid, int* src, double* kscr, const int* dst, i64 n, const i64* indptr,
                                            const int* indices, const double* cum, const float* w, const int* posdeg,
                                            int k, int replace, int weighted, const i64* seg, int nseg, i64 edgebase,
                                            const i64* dpos, const int* didx) {
  GRID_STRIDE(i, n) {
    int s = 0;
    while (s + 1 < nseg && seg[s + 1] <= i) s++;
    int v = dst[i];
    i64 m = gs_row_count(v, indptr, posdeg, k, replace, weighted);
    i64 p0 = i * (i64)k;
    gs_draw_row_split(v, p0, m, eid, src, kscr, indptr, indices, cum, w, posdeg, k, replace, weighted,
                      (u64)seg[nseg + 1 + s], dpos, didx);
    for (i64 j = 0; j < m; j++) eid[p0 + j] += edgebase;
    for (i64 j = m; j < k; j++) {
      src[p0 + j] = -1;
      eid[p0 + j] = -1;
    }
  }
}
