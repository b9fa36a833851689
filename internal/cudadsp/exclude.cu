// Target exclusion (link prediction, package link's ExcludeTargets): the
// edges of a sampled block whose destination node and source node form
// one of a step's target pairs are removed, the kept edges staying in
// their order. keys are the pairs as node<<32 | partner (uint32s),
// sorted and distinct, both directions listed. One thread per row: a
// row is short (its fanout), and walking it in order keeps the order.

// lx_partners finds the run of keys whose node is u: [*lo, *hi).
__device__ __forceinline__ void lx_partners(const u64* keys, i64 nk, u32 u, i64* lo, i64* hi) {
  u64 a = (u64)u << 32;
  i64 l = 0, h = nk;  // first key >= a
  while (l < h) {
    i64 m = (l + h) >> 1;
    if (keys[m] < a) l = m + 1; else h = m;
  }
  *lo = l;
  i64 e = l;
  h = nk;  // first key > a | 0xffffffff
  u64 b = a | 0xffffffffULL;
  while (e < h) {
    i64 m = (e + h) >> 1;
    if (keys[m] <= b) e = m + 1; else h = m;
  }
  *hi = e;
}

// lx_find reports whether key k is in keys[lo, hi) (a node's run).
__device__ __forceinline__ bool lx_find(const u64* keys, i64 lo, i64 hi, u64 k) {
  i64 end = hi;
  while (lo < hi) {
    i64 m = (lo + hi) >> 1;
    if (keys[m] < k) lo = m + 1; else hi = m;
  }
  return lo < end && keys[lo] == k;
}

// Pass 1: cnt[i] is the number of row i's edges kept, cnt[nd] = 0 (so
// that the exclusive scan of cnt[0..nd] is the kept block's row
// pointers, its last entry the kept edges).
extern "C" __global__ void lx_count(i64* cnt, const i64* ptr, const int* idx, const int* nodes, i64 nd, const u64* keys,
                                    i64 nk) {
  GRID_STRIDE(i, nd + 1) {
    if (i == nd) {
      cnt[i] = 0;
      continue;
    }
    i64 b = ptr[i], e = ptr[i + 1];
    u32 u = (u32)nodes[i];
    i64 lo, hi;
    lx_partners(keys, nk, u, &lo, &hi);
    if (lo == hi) {
      cnt[i] = e - b;
      continue;
    }
    i64 kept = 0;
    for (i64 j = b; j < e; j++) {
      u64 k = ((u64)u << 32) | (u64)(u32)nodes[idx[j]];
      if (!lx_find(keys, lo, hi, k)) kept++;
    }
    cnt[i] = kept;
  }
}

// Pass 2: row i's kept edges (local source, edge ID) are written from
// nptr[i] on, in their order.
extern "C" __global__ void lx_write(int* oidx, i64* oeid, const i64* nptr, const i64* ptr, const int* idx, const i64* eid,
                                    const int* nodes, i64 nd, const u64* keys, i64 nk) {
  GRID_STRIDE(i, nd) {
    i64 b = ptr[i], e = ptr[i + 1], w = nptr[i];
    u32 u = (u32)nodes[i];
    i64 lo, hi;
    lx_partners(keys, nk, u, &lo, &hi);
    for (i64 j = b; j < e; j++) {
      int s = idx[j];
      if (lo < hi && lx_find(keys, lo, hi, ((u64)u << 32) | (u64)(u32)nodes[s])) continue;
      oidx[w] = s;
      if (oeid) oeid[w] = eid[j];
      w++;
    }
  }
}
