// Device-wide exclusive scan and a stable bucketing (counting sort by key
// with ties kept in input order) built from 1-bit LSD radix passes. All
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

// 1-bit split, pass 1: zeros[t] = number of keys in tile t whose bit is 0.
extern "C" __global__ void radix_count(const u32* keys, i64 n, int bit, i64* zeros) {
  __shared__ i64 sh[SCAN_THREADS];
  i64 base = (i64)blockIdx.x * SCAN_TILE + (i64)threadIdx.x * SCAN_ITEMS;
  i64 c = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; k++)
    if (base + k < n && ((keys[base + k] >> bit) & 1u) == 0) c++;
  i64 total;
  block_exclusive_scan(c, sh, &total);
  if (threadIdx.x == 0) zeros[blockIdx.x] = total;
}

// 1-bit split, pass 2: stable scatter. zeros_before is the exclusive scan
// of the tile counts; total_zeros = zeros_before[last] + zeros[last].
extern "C" __global__ void radix_scatter(const u32* kin, const int* vin, u32* kout, int* vout, i64 n, int bit,
                                         const i64* zeros_before, const i64* zeros, i64 ntiles) {
  __shared__ i64 sh[SCAN_THREADS];
  i64 tile = blockIdx.x;
  i64 tile_start = tile * SCAN_TILE;
  i64 base = tile_start + (i64)threadIdx.x * SCAN_ITEMS;
  i64 total_zeros = zeros_before[ntiles - 1] + zeros[ntiles - 1];
  u32 kk[SCAN_ITEMS];
  int vv[SCAN_ITEMS];
  i64 c = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; k++) {
    if (base + k < n) {
      kk[k] = kin[base + k];
      vv[k] = vin[base + k];
      if (((kk[k] >> bit) & 1u) == 0) c++;
    }
  }
  i64 total;
  i64 zrank = block_exclusive_scan(c, sh, &total);  // zeros before this thread in the tile
  i64 zb = zeros_before[tile];
  i64 orank = (base - tile_start) - zrank;          // ones before this thread in the tile
  i64 ones_before_tile = tile_start - zb;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; k++) {
    if (base + k < n) {
      i64 pos;
      if (((kk[k] >> bit) & 1u) == 0) {
        pos = zb + zrank;
        zrank++;
      } else {
        pos = total_zeros + ones_before_tile + orank;
        orank++;
      }
      kout[pos] = kk[k];
      vout[pos] = vv[k];
    }
  }
}
