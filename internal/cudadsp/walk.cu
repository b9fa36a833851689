// Collective random walk kernels (Walker, walk.go). They follow csp.cu in
// the same module (routing reuses csp_route_count/scatter) and are
// mirrored on the host in walk_test.go. A walker is a record of 4 int64:
// origin rank, walk index, stream key, current node.

#define WK_WORDS 4

// The walks' output: walk i's slots [i*(L+1), (i+1)*(L+1)) hold its start,
// then -1 until the steps come back.
extern "C" __global__ void wk_init(int* out, const int* starts, i64 n, int L) {
  i64 stride = (i64)L + 1;
  GRID_STRIDE(s, n * stride) {
    i64 i = s / stride, t = s - i * stride;
    out[s] = t == 0 ? starts[i] : -1;
  }
}

// Records of w int64 in grouped order: dst[j] = src[pos[j]].
extern "C" __global__ void wk_pack(i64* dst, const i64* src, const int* pos, i64 n, int w) {
  GRID_STRIDE(s, n * w) {
    i64 j = s / w, c = s - j * w;
    dst[s] = src[(i64)pos[j] * w + c];
  }
}

// Step t (0-based) of the R walkers received (recv, 4 words each) at the
// owner of rows [lo, lo+rows): a walker at v moves to row v's entry
// rng_below(rng_hash(key, t), degree), as sample.RandomWalk. Its trace
// (origin in trO, {walk, t+1, node} in trR) stays here until the end; it
// goes on (rec, F) if t+1 < L. A walker at a node without neighbors
// stops: F and trO get -1. A walker that is not this rank's to step (a
// protocol violation) counts in bad and stops.
extern "C" __global__ void wk_step(i64* rec, int* F, int* trO, i64* trR, i64* bad, const i64* recv, i64 R, int t, int L,
                                   int P, const i64* rowptr, const int* indices, i64 lo, i64 rows) {
  GRID_STRIDE(j, R) {
    const i64* in = recv + j * WK_WORDS;
    i64 origin = in[0], idx = in[1], key = in[2], v = in[3];
    i64 r = v - lo;
    F[j] = -1;
    trO[j] = -1;
    if (origin < 0 || origin >= P || idx < 0 || r < 0 || r >= rows) {
      atomicAdd((unsigned long long*)bad, 1ULL);
      continue;
    }
    i64 a = rowptr[r], d = rowptr[r + 1] - a;
    if (d == 0) continue;  // a dead end: the walk stops
    int u = indices[a + (i64)rng_below(rng_hash((u64)key, (u64)t), (u64)d)];
    trO[j] = (int)origin;
    trR[j * 3] = idx;
    trR[j * 3 + 1] = t + 1;
    trR[j * 3 + 2] = u;
    if (t + 1 < L) {
      F[j] = u;
      i64* o = rec + j * WK_WORDS;
      o[0] = origin;
      o[1] = idx;
      o[2] = key;
      o[3] = u;
    }
  }
}

// The traces that came home ({walk, step, node}, 3 words each) into the
// walks' slots; a record outside the n walks of length L, or a node
// outside [0, N), counts in bad and is dropped.
extern "C" __global__ void wk_scatter(int* out, i64* bad, const i64* recv, i64 m, i64 n, int L, i64 N) {
  GRID_STRIDE(j, m) {
    i64 idx = recv[j * 3], t = recv[j * 3 + 1], u = recv[j * 3 + 2];
    if (idx < 0 || idx >= n || t < 1 || t > L || u < 0 || u >= N) {
      atomicAdd((unsigned long long*)bad, 1ULL);
      continue;
    }
    out[idx * ((i64)L + 1) + t] = (int)u;
  }
}
