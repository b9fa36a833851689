// Collective sampling kernels: routing a frontier to the owners of its
// nodes, packing the owners' answers per requester and scattering them
// back into frontier order. Index formulas are mirrored in plan_test.go.

// owner[i] = the part owning F[i]: the last p < P with off[p] <= F[i]
// (empty parts skipped, as book.Owner); P for a node outside [0, off[P]).
extern "C" __global__ void csp_owner(int* owner, const int* F, i64 n, const i64* off, int P) {
  GRID_STRIDE(i, n) {
    i64 v = F[i];
    if (v < 0 || v >= off[P]) {
      owner[i] = P;
      continue;
    }
    int lo = 0, hi = P;  // off[lo] <= v < off[hi]
    while (hi - lo > 1) {
      int mid = (lo + hi) >> 1;
      if (off[mid] <= v) lo = mid; else hi = mid;
    }
    owner[i] = lo;
  }
}

// out[i] = in[idx[i]].
extern "C" __global__ void csp_gather(int* out, const int* in, const int* idx, i64 n) {
  GRID_STRIDE(i, n) out[i] = in[idx[i]];
}

// Word 1 of each header row: the number of frontier nodes owned by p
// (bptr: the owner buckets' offsets).
extern "C" __global__ void csp_counts(i64* hdr, int W, const i64* bptr, int P) {
  GRID_STRIDE(p, P) hdr[p * W + 1] = bptr[p + 1] - bptr[p];
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
