// GPU neighbor sampling and block building. Per-node draws mirror
// package sample's CPU rules exactly for uniform sampling (same streams,
// Floyd's algorithm, same order), so uniform batches are identical to the
// CPU sampler's. Sizes that only the device knows (frontier length, edge
// count) are read from device memory, so a whole batch is built without a
// host round trip. Edge positions (indptr values, offsets into indices,
// weights, running sums and the split copy) are i64 throughout: a graph
// may hold more than 2^31 edges. Node ids and posdeg (a row's positive-
// weight edges) are int.

#define GS_GOLDEN 0x9E3779B97F4A7C15ULL

// Edges node v yields at fanout k (-1: all of them): min(degree, k)
// without replacement, k (or 0 for no candidates) with it; weighted
// sampling counts only positive-weight edges.
__device__ __forceinline__ i64 gs_row_count(int v, const i64* indptr, const int* posdeg, int k, int replace, int weighted) {
  i64 n = indptr[v + 1] - indptr[v];
  if (k < 0) return n;
  i64 avail = weighted ? (i64)posdeg[v] : n;
  if (replace) return avail == 0 ? 0 : k;
  return avail < k ? avail : k;
}

// counts[i] = number of edges destination i yields (0 past the frontier;
// counts has ndmax+1 entries so that the exclusive scan ends in the total).
extern "C" __global__ void gs_count(i64* counts, const int* dst, const i64* nd_p, i64 ndmax, const i64* indptr,
                                    const int* posdeg, int k, int replace, int weighted) {
  i64 nd = *nd_p;
  GRID_STRIDE(i, ndmax + 1) {
    counts[i] = i < nd ? gs_row_count(dst[i], indptr, posdeg, k, replace, weighted) : 0;
  }
}

// Node v's m draws: write its sampled edge ids (positions in the graph's
// indices) and source nodes at p0. kscr is per-edge scratch for the
// weighted reservoir. (gs_draw below and the collective sampler's
// gs_sample_stride, hop.cu, share it.) With a split topology (dpos not
// null), rows with dpos[v] >= 0 read their neighbors from the device
// copy didx[dpos[v]..], the others from indices (host memory): the edge
// ids, and so the draws, are the same either way.
__device__ __forceinline__ void gs_draw_row_split(int v, i64 p0, i64 m, i64* eid, int* src, double* kscr,
                                                  const i64* indptr, const int* indices, const double* cum,
                                                  const float* w, const int* posdeg, int k, int replace, int weighted,
                                                  u64 hopkey, const i64* dpos, const int* didx) {
  {
    i64 base = indptr[v], n = indptr[v + 1] - base;
    if (m == 0) return;
    i64* out = eid + p0;
    u64 key = rng_hash(hopkey + GS_GOLDEN, (u64)v);  // rng.Derive(hopkey, v)
    if (m == n && (k < 0 || !replace)) {
      for (i64 j = 0; j < m; j++) out[j] = base + j;
    } else if (weighted && replace) {
      // Inverse CDF over the row's running weight sums.
      double total = cum[base + n - 1];
      for (i64 j = 0; j < m; j++) {
        double u = (double)(rng_hash(key, (u64)j) >> 11) * (1.0 / 9007199254740992.0) * total;
        i64 lo = 0, hi = n - 1;  // first e with cum[e] > u
        while (lo < hi) {
          i64 mid = (lo + hi) >> 1;
          if (cum[base + mid] > u) hi = mid; else lo = mid + 1;
        }
        out[j] = base + lo;
      }
    } else if (weighted) {
      if (m == posdeg[v]) {
        i64 q = 0;
        for (i64 e = 0; e < n; e++)
          if (w[base + e] > 0.0f) out[q++] = base + e;
      } else {
        // A-Res: key log(U)/w, the m largest win; kept sorted by key
        // (descending) in out/keys, then re-sorted by position.
        double* ks = kscr + p0;
        i64 have = 0;
        for (i64 e = 0; e < n; e++) {
          float we = w[base + e];
          if (!(we > 0.0f)) continue;
          double u = ((double)(rng_hash(key, (u64)e) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
          double kv = log(u) / (double)we;
          if (have == m && kv <= ks[m - 1]) continue;
          i64 q = have < m ? have++ : m - 1;
          while (q > 0 && ks[q - 1] < kv) {
            ks[q] = ks[q - 1];
            out[q] = out[q - 1];
            q--;
          }
          ks[q] = kv;
          out[q] = base + e;
        }
        for (i64 a = 1; a < m; a++) {  // positions ascending (row order)
          i64 x = out[a], q = a;
          while (q > 0 && out[q - 1] > x) { out[q] = out[q - 1]; q--; }
          out[q] = x;
        }
      }
    } else if (replace) {
      for (i64 j = 0; j < m; j++) out[j] = base + (i64)rng_below(rng_hash(key, (u64)j), (u64)n);
    } else {
      // Floyd's algorithm, as sample's floydSorted: positions sorted.
      u64 ctr = 0;
      i64 have = 0;
      for (u64 j = (u64)(n - m); j < (u64)n; j++) {
        i64 t = base + (i64)rng_below(rng_hash(key, ctr++), j + 1);
        i64 q = have;
        while (q > 0 && out[q - 1] > t) q--;
        if (q > 0 && out[q - 1] == t) {
          out[have++] = base + (i64)j;  // every chosen position is < j
          continue;
        }
        for (i64 s = have; s > q; s--) out[s] = out[s - 1];
        out[q] = t;
        have++;
      }
    }
    i64 dp = dpos ? dpos[v] : -1;
    if (dp >= 0) {
      for (i64 j = 0; j < m; j++) src[p0 + j] = didx[dp + (out[j] - base)];
    } else {
      for (i64 j = 0; j < m; j++) src[p0 + j] = indices[out[j]];
    }
  }
}

__device__ __forceinline__ void gs_draw_row(int v, i64 p0, i64 m, i64* eid, int* src, double* kscr,
                                            const i64* indptr, const int* indices, const double* cum, const float* w,
                                            const int* posdeg, int k, int replace, int weighted, u64 hopkey) {
  gs_draw_row_split(v, p0, m, eid, src, kscr, indptr, indices, cum, w, posdeg, k, replace, weighted, hopkey, 0, 0);
}

// Destination i's draws at ptr[i] (gs_sample and the collective
// sampler's gs_sample_seg, hop.cu, share it).
__device__ __forceinline__ void gs_draw(i64 i, i64* eid, int* src, double* kscr, const i64* ptr, const int* dst,
                                        const i64* indptr, const int* indices, const double* cum, const float* w,
                                        const int* posdeg, int k, int replace, int weighted, u64 hopkey,
                                        const i64* dpos, const int* didx) {
  gs_draw_row_split(dst[i], ptr[i], ptr[i + 1] - ptr[i], eid, src, kscr, indptr, indices, cum, w, posdeg, k, replace,
                    weighted, hopkey, dpos, didx);
}

// One thread per destination: its draws (gs_draw).
extern "C" __global__ void gs_sample(i64* eid, int* src, double* kscr, const i64* ptr, const int* dst, const i64* nd_p,
                                     const i64* indptr, const int* indices, const double* cum, const float* w,
                                     const int* posdeg, int k, int replace, int weighted, u64 hopkey,
                                     const i64* dpos, const int* didx) {
  i64 nd = *nd_p;
  GRID_STRIDE(i, nd) {
    gs_draw(i, eid, src, kscr, ptr, dst, indptr, indices, cum, w, posdeg, k, replace, weighted, hopkey, dpos, didx);
  }
}

__device__ __forceinline__ u32 gs_hash32(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Node at position p of the sequence [dst[0..nd), src[0..E)].
__device__ __forceinline__ int gs_node(const int* dst, const int* src, i64 nd, i64 p) {
  return p < nd ? dst[p] : src[p - nd];
}

__device__ __forceinline__ u64 gs_find(const int* tkeys, u64 mask, int key) {
  u64 s = gs_hash32((u32)key) & mask;
  while (tkeys[s] != key) s = (s + 1) & mask;
  return s;
}

// Open-addressing table: node -> smallest position where it occurs.
extern "C" __global__ void gs_insert(int* tkeys, int* tpos, u64 mask, const int* dst, const i64* nd_p, const int* src,
                                     const i64* ptr) {
  i64 nd = *nd_p, total = nd + ptr[nd];
  GRID_STRIDE(p, total) {
    int key = gs_node(dst, src, nd, p);
    u64 s = gs_hash32((u32)key) & mask;
    for (;;) {
      int prev = atomicCAS(&tkeys[s], -1, key);
      if (prev == -1 || prev == key) {
        atomicMin(&tpos[s], (int)p);
        break;
      }
      s = (s + 1) & mask;
    }
  }
}

// flags[p] = 1 where p is a node's first occurrence (pmax+1 entries).
extern "C" __global__ void gs_flags(i64* flags, const int* tkeys, const int* tpos, u64 mask, const int* dst,
                                    const i64* nd_p, const int* src, const i64* ptr, i64 pmax) {
  i64 nd = *nd_p, total = nd + ptr[nd];
  GRID_STRIDE(p, pmax + 1) {
    i64 f = 0;
    if (p < total) f = tpos[gs_find(tkeys, mask, gs_node(dst, src, nd, p))] == p;
    flags[p] = f;
  }
}

// Local ids are ranks of first occurrences: destinations keep 0..nd-1,
// new sources follow in first-seen order. Writes the source node list,
// the block's local column indices and sizes = {nd, E, numSrc}.
extern "C" __global__ void gs_relabel(int* srcnodes, int* local, i64* sizes, const i64* newid, const int* tkeys,
                                      const int* tpos, u64 mask, const int* dst, const i64* nd_p, const int* src,
                                      const i64* ptr, i64 pmax) {
  i64 nd = *nd_p, E = ptr[nd], total = nd + E;
  GRID_STRIDE(p, total) {
    int key = gs_node(dst, src, nd, p);
    u64 s = gs_find(tkeys, mask, key);
    int first = tpos[s];
    if (first == p) srcnodes[newid[p]] = key;
    if (p >= nd) local[p - nd] = (int)newid[first];
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    sizes[0] = nd;
    sizes[1] = E;
    sizes[2] = newid[pmax];
  }
}
