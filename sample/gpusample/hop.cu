// Segmented draws for collective samplers (package dsp/gpucsp): the n
// destinations are split into segments [segoff[s], segoff[s+1]), each
// drawn under its own hop key segkey[s] (the requester's), in one pass
// with the same per-destination rules as gs_sample.
extern "C" __global__ void gs_sample_seg(i64* eid, int* src, double* kscr, const i64* ptr, const int* dst, i64 n,
                                         const i64* indptr, const int* indices, const double* cum, const float* w,
                                         const int* posdeg, int k, int replace, int weighted, const i64* segoff,
                                         const u64* segkey, int nseg) {
  GRID_STRIDE(i, n) {
    int s = 0;
    while (s + 1 < nseg && segoff[s + 1] <= i) s++;
    gs_draw(i, eid, src, kscr, ptr, dst, indptr, indices, cum, w, posdeg, k, replace, weighted, segkey[s]);
  }
}
