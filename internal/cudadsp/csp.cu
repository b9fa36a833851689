// Collective sampling kernels: routing a frontier to the owners of its
// nodes and bringing the owners' answers back into frontier order
// (strided for a fixed fanout, packed with counts for fanout -1). Every
// kernel is mirrored on the host in machine_test.go.

#define CSP_MAXP 1024

// The part owning v: the last p < P with off[p] <= v (empty parts
// skipped, as book.Owner); P for a node outside [0, off[P]).
__device__ __forceinline__ int csp_owner_of(i64 v, const i64* off, int P) {
  if (v < 0 || v >= off[P]) return P;
  int lo = 0, hi = P;  // off[lo] <= v < off[hi]
  while (hi - lo > 1) {
    int mid = (lo + hi) >> 1;
    if (off[mid] <= v) lo = mid; else hi = mid;
  }
  return lo;
}

// Routing, pass 1: cnt[o] = nodes of the frontier F[0:*nfp) owned by
// part o (o = P: outside the graph). Counts per block in shared memory,
// then one atomic per part. cnt starts zeroed.
extern "C" __global__ void csp_route_count(i64* cnt, const int* F, const i64* nfp, const i64* off, int P) {
  __shared__ int hist[CSP_MAXP + 1];
  i64 nF = *nfp;
  for (int t = threadIdx.x; t <= P; t += blockDim.x) hist[t] = 0;
  __syncthreads();
  GRID_STRIDE(i, nF) atomicAdd(&hist[csp_owner_of(F[i], off, P)], 1);
  __syncthreads();
  for (int t = threadIdx.x; t <= P; t += blockDim.x)
    if (hist[t]) atomicAdd((unsigned long long*)&cnt[t], (unsigned long long)hist[t]);
}

// Routing, pass 2: node i takes a slot in its owner's range of sendIDs
// (ranges in part order, part o's from cnt[0] + ... + cnt[o-1]) and pos
// records i there. The order inside a range depends on scheduling; it
// does not matter, as every draw depends on the node alone and pos
// brings the answers back into frontier order. cur (P+1, zeroed) hands
// out the slots: per chunk of blockDim.x nodes, shared-memory ranks and
// one atomic per part. Block 0 writes the header rows (hdr, P rows of W
// words; see plan.go).
extern "C" __global__ void csp_route_scatter(int* sendIDs, int* pos, i64* cur, const i64* cnt, const int* F, const i64* nfp,
                                             const i64* off, int P, i64* hdr, int W, i64 key, int hop, int fanout,
                                             int hops) {
  __shared__ int hist[CSP_MAXP + 1];
  __shared__ i64 start[CSP_MAXP + 1];
  __shared__ i64 base[CSP_MAXP + 1];
  i64 nF = *nfp;
  if (threadIdx.x == 0) {
    i64 s = 0;
    for (int o = 0; o <= P; o++) {
      start[o] = s;
      s += cnt[o];
    }
  }
  for (i64 c0 = (i64)blockIdx.x * blockDim.x; c0 < nF; c0 += (i64)gridDim.x * blockDim.x) {
    for (int t = threadIdx.x; t <= P; t += blockDim.x) hist[t] = 0;
    __syncthreads();
    i64 i = c0 + threadIdx.x;
    int v = 0, o = -1, r = 0;
    if (i < nF) {
      v = F[i];
      o = csp_owner_of(v, off, P);
      r = atomicAdd(&hist[o], 1);
    }
    __syncthreads();
    for (int t = threadIdx.x; t <= P; t += blockDim.x)
      if (hist[t]) base[t] = start[t] + (i64)atomicAdd((unsigned long long*)&cur[t], (unsigned long long)hist[t]);
    __syncthreads();
    if (o >= 0) {
      i64 s = base[o] + r;
      sendIDs[s] = v;
      pos[s] = (int)i;
    }
    __syncthreads();
  }
  if (blockIdx.x == 0) {
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
      i64* row = hdr + (i64)p * W;
      row[0] = 0;       // status
      row[1] = cnt[p];  // count
      row[2] = key;
      row[3] = hop;
      row[4] = fanout;
      row[5] = hops;
      row[6] = nF;
      row[7] = cnt[P];  // outside the graph
    }
  }
}

// Strided answers (fanout k > 0): row j of ans (k slots, -1 padded)
// answers grouped node j, at frontier position pos[j]. cnt[pos[j]] = its
// valid slots; cnt[nF] = 0 for the exclusive scan.
extern "C" __global__ void csp_stride_counts(i64* cnt, const int* ans, const int* pos, i64 nF, int k) {
  GRID_STRIDE(j, nF + 1) {
    if (j == nF) {
      cnt[nF] = 0;
      continue;
    }
    const int* row = ans + j * k;
    int m = 0;
    while (m < k && row[m] >= 0) m++;
    cnt[pos[j]] = m;
  }
}

// One thread per slot: valid slot t of row j goes to ptr[pos[j]] + t of
// src, its edge id from ansE (or -1 when ansE is 0) to eid.
extern "C" __global__ void csp_stride_compact(int* src, i64* eid, const int* ans, const i64* ansE, const i64* ptr,
                                              const int* pos, i64 nF, int k) {
  GRID_STRIDE(s, nF * k) {
    int v = ans[s];
    if (v < 0) continue;
    i64 j = s / k, t = s - j * k;
    i64 d = ptr[pos[j]] + t;
    src[d] = v;
    eid[d] = ansE ? ansE[s] : -1;
  }
}

// tot[p] = edges drawn for requester p's segment [roff[p], roff[p+1]) of
// the received nodes; tot[P] = all of them.
extern "C" __global__ void csp_totals(i64* tot, const i64* qptr, const i64* roff, int P) {
  GRID_STRIDE(p, P + 1) tot[p] = p < P ? qptr[roff[p + 1]] - qptr[roff[p]] : qptr[roff[P]];
}

// The owner's answer: the message to requester p is the counts of its
// n_p nodes, then their neighbors; it starts at roff[p] + qptr[roff[p]]
// (the counts and neighbors of the earlier segments).
extern "C" __global__ void csp_pack(int* packed, const i64* qptr, const int* src, const i64* roff, int P, i64 R) {
  GRID_STRIDE(i, R) {
    i64 p = edge_row(roff, P, i);
    i64 s0 = roff[p];
    i64 base = s0 + qptr[s0];
    i64 np = roff[p + 1] - s0;
    i64 a = qptr[i], b = qptr[i + 1];
    packed[base + (i - s0)] = (int)(b - a);
    int* out = packed + base + np + (a - qptr[s0]);
    for (i64 e = a; e < b; e++) out[e - a] = src[e];
  }
}

// x[i] += c.
extern "C" __global__ void csp_add_i64(i64* x, i64 n, i64 c) {
  GRID_STRIDE(i, n) x[i] += c;
}

// The requester's counts: send position j went to owner q (bptr's
// bucket), whose message starts at bptr[q] + S[q] (S: the earlier
// owners' neighbor totals), so j's count is at S[q] + j. cntS is in send
// order, cnt in frontier order (order[j] is j's frontier position); both
// get a trailing 0 for the exclusive scans.
extern "C" __global__ void csp_unpack_counts(i64* cnt, i64* cntS, const int* recv, const i64* bptr, const i64* S,
                                             const int* order, int P, i64 nF) {
  GRID_STRIDE(j, nF + 1) {
    if (j == nF) {
      cnt[nF] = 0;
      cntS[nF] = 0;
      continue;
    }
    i64 q = edge_row(bptr, P, j);
    i64 c = recv[S[q] + j];
    cntS[j] = c;
    cnt[order[j]] = c;
  }
}

// The requester's neighbors: j's are at bptr[q+1] + sptr[j] of the
// received buffer (after q's counts), its edge ids at sptr[j] of recvE;
// they go to ptr[order[j]] in frontier order. eid may be 0 (not asked).
extern "C" __global__ void csp_unpack_src(int* src, i64* eid, const int* recv, const i64* recvE, const i64* ptr,
                                          const i64* sptr, const i64* bptr, const int* order, int P, i64 nF) {
  GRID_STRIDE(j, nF) {
    i64 q = edge_row(bptr, P, j);
    i64 a = sptr[j], m = sptr[j + 1] - a;
    const int* in = recv + bptr[q + 1] + a;
    i64 d = ptr[order[j]];
    for (i64 t = 0; t < m; t++) src[d + t] = in[t];
    if (eid)
      for (i64 t = 0; t < m; t++) eid[d + t] = recvE[a + t];
  }
}
