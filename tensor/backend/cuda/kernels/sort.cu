// Device-wide exclusive scan and a stable bucketing (counting sort by key
// with ties kept in input order) built from 8-bit LSD radix passes. All
// steps are deterministic.

#define SCAN_THREADS 256
#define SCAN_ITEMS 4
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

// Exclusive scan of one tile per block in shared memory; writes the tile
// total to sums[blockIdx.x].
__device__ __forceinline__ i64 block_exclusive_scan(i64 v, i64* sh, i64* total) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  // Hillis-Steele inclusive scan over SCAN_THREADS values.
  for (unsigned o = 1; o < SCAN_THREADS; o <<= 1) {
    i64 add = t >= o ? sh[t - o] : 0;
    __syncthreads();
    sh[t] += add;
    __syncthreads();
  }
  i64 incl = sh[t];
  *total = sh[SCAN_THREADS - 1];
  __syncthreads();
  return incl - v;
}

extern "C" __global__ void scan_tiles(const i64* in, i64* out, i64* sums, i64 n) {
  __shared__ i64 sh[SCAN_THREADS];
  i64 base = (i64)blockIdx.x * SCAN_TILE + (i64)threadIdx.x * SCAN_ITEMS;
  i64 v[SCAN_ITEMS];
  i64 local = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; k++) {
    v[k] = base + k < n ? in[base + k] : 0;
    local += v[k];
  }
  i64 total;
  i64 run = block_exclusive_scan(local, sh, &total);
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; k++) {
    if (base + k < n) out[base + k] = run;
    run += v[k];
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

extern "C" __global__ void scan_add(i64* out, const i64* offsets, i64 n) {
  GRID_STRIDE(i, n) out[i] += offsets[i / SCAN_TILE];
}

// Histogram of keys into counts[0..nkeys) (atomic integer adds: the result
// does not depend on order). Keys outside [0, nkeys) go to bucket nkeys
// and, when err is set, are reported.
extern "C" __global__ void bucket_count(i64* counts, const int* keys, i64 n, i64 nkeys, u64* err) {
  GRID_STRIDE(i, n) {
    int k = keys[i];
    if (k < 0 || k >= nkeys) {
      index_error(err, i);
      k = (int)nkeys;
    }
    atomicAdd((u64*)&counts[k], 1ULL);
  }
}

// Sort pairs (key, value) start: keys copied with out-of-range keys mapped
// to nkeys, values = positions.
extern "C" __global__ void radix_init(u32* keys, int* vals, const int* in, i64 n, i64 nkeys) {
  GRID_STRIDE(i, n) {
    int k = in[i];
    keys[i] = (k < 0 || k >= nkeys) ? (u32)nkeys : (u32)k;
    vals[i] = (int)i;
  }
}

// 8-bit LSD radix passes (a stable sort of 32-bit keys with int values in
// ceil(bits/8) passes). Each block owns a tile of RADIX_TILE consecutive
// elements. radix_hist8 counts the tile's digits into hist[digit *
// ntiles + tile]; an exclusive scan of hist gives every (digit, tile) its
// first output position; radix_scatter8 walks its tile in order, 256
// elements a round, ranking equal digits by lane within a warp
// (__match_any_sync), by warp within a round and by round within the
// tile, so equal keys keep their input order: the sort is stable and
// deterministic.
#define RADIX_TILE 2048

extern "C" __global__ void radix_hist8(const u32* keys, i64 n, int shift, i64 ntiles, i64* hist) {
  __shared__ int cnt[256];
  int t = threadIdx.x;  // blockDim.x == 256
  cnt[t] = 0;
  __syncthreads();
  i64 start = (i64)blockIdx.x * RADIX_TILE;
  for (int k = t; k < RADIX_TILE; k += 256) {
    i64 i = start + k;
    if (i < n) atomicAdd(&cnt[(keys[i] >> shift) & 255u], 1);
  }
  __syncthreads();
  hist[(i64)t * ntiles + blockIdx.x] = cnt[t];
}

extern "C" __global__ void radix_scatter8(const u32* kin, const int* vin, u32* kout, int* vout, i64 n, int shift, i64 ntiles,
                                          const i64* offs) {
  __shared__ i64 base[256];
  __shared__ int wc[8][256];
  int t = threadIdx.x, w = t >> 5, lane = t & 31;
  i64 tile = blockIdx.x;
  base[t] = offs[(i64)t * ntiles + tile];
  i64 start = tile * RADIX_TILE;
  for (int round = 0; round < RADIX_TILE / 256; round++) {
    i64 first = start + (i64)round * 256;
    if (first >= n) break;  // uniform across the block
#pragma unroll
    for (int k = 0; k < 8; k++) wc[k][t] = 0;
    __syncthreads();
    i64 i = first + t;
    bool ok = i < n;
    u32 key = ok ? kin[i] : 0u;
    int val = ok ? vin[i] : 0;
    int dig = ok ? (int)((key >> shift) & 255u) : 256;
    unsigned peers = __match_any_sync(0xffffffffu, dig);
    int rank = __popc(peers & ((1u << lane) - 1u));
    if (ok && rank == 0) wc[w][dig] = __popc(peers);
    __syncthreads();
    int run = 0;  // thread t owns digit t: exclusive prefix over warps
#pragma unroll
    for (int k = 0; k < 8; k++) {
      int c = wc[k][t];
      wc[k][t] = run;
      run += c;
    }
    __syncthreads();
    if (ok) {
      i64 pos = base[dig] + wc[w][dig] + rank;
      kout[pos] = key;
      vout[pos] = val;
    }
    __syncthreads();
    base[t] += run;
  }
}
