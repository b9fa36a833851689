// Layer-wise collective sampling kernels (LayerSampler, layer.go). They
// follow csp.cu in the same module (csp_add_i64 is reused) and are
// mirrored on the host in layer_test.go. Uniform draws are gpusample's
// (gs_draw_row through Stepper.DrawHop); the weighted draw below is
// the layer-wise rule (an inverse CDF over the row), which differs from
// gpusample's.

#define LW_OWNER_SHIFT 48
#define LW_DEG_MASK ((1LL << LW_OWNER_SHIFT) - 1)

// The owner's answer to the requesters' frontier nodes: for received node
// i (global id ids[i], one of rows [lo, lo+rows)) its degree and, with
// w == 2, the float64 bits of its row's weight sum. A node outside those
// rows (a protocol violation) answers 0 and counts in bad.
extern "C" __global__ void lw_info(i64* out, i64* bad, const int* ids, i64 R, const i64* rowptr, const i64* roww, i64 lo,
                                   i64 rows, int w) {
  GRID_STRIDE(i, R) {
    i64 r = (i64)ids[i] - lo;
    i64 d = 0, wb = 0;
    if (r < 0 || r >= rows) {
      atomicAdd((unsigned long long*)bad, 1ULL);
    } else {
      d = rowptr[r + 1] - rowptr[r];
      if (w == 2) wb = roww[r];
    }
    out[i * w] = d;
    if (w == 2) out[i * w + 1] = wb;
  }
}

// The requester's view of the answers: grouped position j (owner q, the
// bucket of bptr) is frontier position pos[j]; out gets, in frontier
// order, the degree with the owner in the high bits, then the weight.
extern "C" __global__ void lw_frontier_info(i64* out, const i64* in, const int* pos, const i64* bptr, int P, i64 nF, int w) {
  GRID_STRIDE(j, nF) {
    i64 q = edge_row(bptr, P, j);
    i64 i = pos[j];
    out[i * w] = (in[j * w] & LW_DEG_MASK) | (q << LW_OWNER_SHIFT);
    if (w == 2) out[i * w + 1] = in[j * w + 1];
  }
}

// The allocation message: allocF (frontier order, from the host) in
// grouped order into allocG (nF+1 entries, a trailing 0 for the scan) and
// into msg, where owner q's part starts at bptr[q] + 2q with the two
// header words hdr[2q], hdr[2q+1] (status, total) before its counts.
extern "C" __global__ void lw_pack_alloc(i64* allocG, i64* msg, const i64* allocF, const int* pos, const i64* bptr,
                                         const i64* hdr, int P, i64 nF) {
  GRID_STRIDE(t, nF + 1 + P) {
    if (t < nF) {
      i64 q = edge_row(bptr, P, t);
      i64 a = allocF[pos[t]];
      allocG[t] = a;
      msg[t + 2 * (q + 1)] = a;
    } else if (t == nF) {
      allocG[nF] = 0;
    } else {
      i64 q = t - nF - 1;
      msg[bptr[q] + 2 * q] = hdr[2 * q];
      msg[bptr[q] + 2 * q + 1] = hdr[2 * q + 1];
    }
  }
}

// The owner's draw counts: received node i of requester p (segment
// [roff[p], roff[p+1])) was allotted k = msg[i + 2(p+1)] draws. A count
// an owner refuses (negative, above maxk, from a node
// without neighbors, above the degree without replacement, from a node
// whose weights are all 0) counts in bad and draws nothing. cnt[R] = 0.
extern "C" __global__ void lw_owner_counts(i64* cnt, i64* bad, const i64* msg, const i64* info, const i64* roff, int P,
                                           i64 R, int w, int replace, i64 maxk) {
  GRID_STRIDE(i, R + 1) {
    if (i == R) {
      cnt[R] = 0;
      continue;
    }
    i64 p = edge_row(roff, P, i);
    i64 k = msg[i + 2 * (p + 1)];
    i64 d = info[i * w];
    bool ok = k >= 0 && k <= maxk && !(k > 0 && d == 0) && (replace || k <= d);
    if (ok && w == 2 && k > 0) ok = __longlong_as_double(info[i * w + 1]) > 0.0;
    if (!ok) atomicAdd((unsigned long long*)bad, 1ULL);
    cnt[i] = ok ? k : 0;
  }
}

// Each requester's segment must add up to the total in its header.
extern "C" __global__ void lw_owner_check(i64* bad, const i64* qptr, const i64* roff, const i64* tot, int P) {
  GRID_STRIDE(p, P) {
    if (qptr[roff[p + 1]] - qptr[roff[p]] != tot[p]) atomicAdd((unsigned long long*)bad, 1ULL);
  }
}

// After a violation nothing is drawn: every offset becomes 0, so the
// answers keep their -1 fill and stay inside their buffers.
extern "C" __global__ void lw_guard(i64* qptr, const i64* bad, i64 R) {
  i64 b = *bad;
  GRID_STRIDE(i, R + 1) {
    if (b != 0) qptr[i] = 0;
  }
}

// Weighted draws with replacement, one thread per drawn edge t: node i
// (qptr's row of t) draws its (t - qptr[i])-th edge with the stream
// rng.Derive(key, v) as the CPU machine's draw: u = (1 - OpenFloat64()) *
// sum, the first edge whose running weight sum exceeds u, else the row's
// last positive-weight edge. seg holds nseg+1 offsets, then nseg keys.
// eid gets global edge ids (positions plus edgebase).
extern "C" __global__ void lw_draw_weighted(int* src, i64* eid, const int* ids, const i64* qptr, i64 R, const i64* seg,
                                            int nseg, const i64* rowptr, const int* indices, const double* cum,
                                            const int* lastpos, i64 lo, i64 edgebase, i64 E) {
  i64 total = qptr[R];
  GRID_STRIDE(t, E) {
    if (t >= total) continue;
    i64 i = edge_row(qptr, R, t);
    i64 s = edge_row(seg, nseg, i);
    int v = ids[i];
    i64 r = (i64)v - lo;
    i64 base = rowptr[r], n = rowptr[r + 1] - base;
    u64 key = rng_hash((u64)seg[nseg + 1 + s] + 0x9E3779B97F4A7C15ULL, (u64)v);  // rng.Derive(key, v)
    u64 h = rng_hash(key, (u64)(t - qptr[i]));
    double open = (double)((h >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u = (1.0 - open) * cum[base + n - 1];
    i64 a = 0, b = n;  // first e with cum[e] > u, n if none
    while (a < b) {
      i64 mid = (a + b) >> 1;
      if (cum[base + mid] > u) b = mid; else a = mid + 1;
    }
    if (a == n) a = lastpos[r];
    src[t] = indices[base + a];
    eid[t] = edgebase + base + a;
  }
}

// The requester puts the answers in frontier order: answer slot t belongs
// to grouped node j (sptr's row of t: the exclusive scan of the grouped
// counts), at frontier position pos[j], whose row starts at ptr[pos[j]].
// A neighbor outside [0, n) (a protocol violation) counts in bad and
// becomes node 0, so that relabeling stays in bounds.
extern "C" __global__ void lw_unpack(int* src, i64* eid, i64* bad, const int* ans, const i64* ansE, const i64* ptr,
                                     const i64* sptr, const int* pos, i64 nF, i64 E, i64 n) {
  GRID_STRIDE(t, E) {
    i64 j = edge_row(sptr, nF, t);
    i64 d = ptr[pos[j]] + (t - sptr[j]);
    int u = ans[t];
    if (u < 0 || (i64)u >= n) {
      atomicAdd((unsigned long long*)bad, 1ULL);
      u = 0;
    }
    src[d] = u;
    eid[d] = ansE ? ansE[t] : -1;
  }
}
