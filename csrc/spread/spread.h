// Per-item math of the spreadout family (FedAwS / FedALC), shared by the CPU and CUDA launchers.
//
// knn_classes ranks candidates by a cheap GEMM-based key (l2: |w_j|^2 - 2 w_i.w_j, cosine:
// -w_i.w_j / |w_j|; the row's own term is constant and dropped) and keeps up to k + 8 candidates,
// then recomputes the kept distances directly in float64 and picks the k smallest by (distance,
// index). Exactness: every key is within `band / 2` of its true value (a worst-case rounding bound),
// so the true k nearest all have keys <= (k-th smallest key) + band. If a row ever has to drop a
// candidate inside that band (more near-ties than the slack holds), it is flagged and recomputed by an
// exact float64 scan over all classes. Distances and tie order thus match a brute-force reference.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

namespace fedkernels {
namespace spread {

enum Metric : int { kL2 = 0, kCosine = 1 };

// Rows whose norm is below this are treated as having this norm under cosine (like F.normalize).
constexpr double kCosineEps = 1e-12;

// Candidates kept per row beyond k while scanning tiles.
FK_HOST_DEVICE FK_INLINE int64_t candidate_capacity(int64_t k) { return k + 8; }

template <typename T>
FK_HOST_DEVICE FK_INLINE double as_double(T x) {
  return static_cast<double>(static_cast<float>(x));
}
template <>
FK_HOST_DEVICE FK_INLINE double as_double<double>(double x) {
  return x;
}

// Strict total order of (key, index): smaller key first, then smaller index.
template <typename K>
FK_HOST_DEVICE FK_INLINE bool key_less(K ka, int64_t ia, K kb, int64_t ib) {
  return ka < kb || (ka == kb && ia < ib);
}

// Insert (key, id) into a row's candidate list kept sorted ascending, holding at most cap entries.
// The kept set is the cap smallest under key_less whatever the insertion order.
template <typename K>
FK_HOST_DEVICE FK_INLINE void candidate_insert(K* keys, int64_t* ids, int64_t& size, int64_t cap, K key, int64_t id) {
  if (size == cap) {
    if (!key_less(key, id, keys[cap - 1], ids[cap - 1])) return;
    --size;
  }
  int64_t pos = size;
  while (pos > 0 && key_less(key, id, keys[pos - 1], ids[pos - 1])) {
    keys[pos] = keys[pos - 1];
    ids[pos] = ids[pos - 1];
    --pos;
  }
  keys[pos] = key;
  ids[pos] = id;
  ++size;
}

// Offer (key, id) to a row's candidate list (sorted, at most cap) whose first k define the running
// threshold. Sets overflow when a candidate within `band` of the k-th key has to be dropped.
template <typename K>
FK_HOST_DEVICE FK_INLINE void candidate_offer(K* keys, int64_t* ids, int64_t& size, int64_t cap, int64_t k, K band,
                                              K key, int64_t id, bool& overflow) {
  if (size == cap) {
    K dropped = key;
    if (key_less(key, id, keys[cap - 1], ids[cap - 1])) {
      dropped = keys[cap - 1];
      candidate_insert(keys, ids, size, cap, key, id);
    }
    if (dropped <= keys[k - 1] + band) overflow = true;
    return;
  }
  candidate_insert(keys, ids, size, cap, key, id);
}

// A full list's gate: a key above it can neither enter the list nor signal an overflow.
template <typename K>
FK_HOST_DEVICE FK_INLINE K candidate_gate(const K* keys, int64_t size, int64_t cap, int64_t k, K band, K inf) {
  if (size < cap) return inf;
  const K g = keys[k - 1] + band;
  return keys[cap - 1] > g ? keys[cap - 1] : g;
}

// Worst-case distance between a GEMM key and its true value, doubled (see the top of this file):
// a length-d dot product in a type with unit roundoff u errs by at most (d + 4) u |a| |b|.
FK_HOST_DEVICE FK_INLINE double key_band(int metric, int64_t d, double unit_roundoff, double norm_i, double max_norm) {
  const double gamma = 2.0 * 1.01 * static_cast<double>(d + 4) * unit_roundoff;
  if (metric == kL2) return 2.0 * gamma * (max_norm * max_norm + 2.0 * norm_i * max_norm);
  return 2.0 * gamma * (norm_i + 1e-30);
}

// Squared norm of a row in float64.
template <typename T>
FK_HOST_DEVICE FK_INLINE double row_sq_norm(const T* a, int64_t d) {
  double s = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    const double x = as_double(a[i]);
    s += x * x;
  }
  return s;
}

// The true distance between two rows, computed directly in float64 (not via the GEMM identity).
// l2: Euclidean distance (not squared). cosine: 1 - cos, as |a/|a| - b/|b||^2 / 2 when both norms
// exceed kCosineEps, else 1 - a.b / (clamped norms); norm_a / norm_b are the rows' float64 norms
// (only used for cosine). It is a sum over dims of distance_term, finished by distance_from_sum:
// exact_distance sums the dims in order (knn_classes, CPU and CUDA alike); lane_distance sums them
// in the order a warp does (pair loss, CPU and CUDA alike).
FK_HOST_DEVICE FK_INLINE bool cosine_unit(double norm_a, double norm_b) {
  return norm_a > kCosineEps && norm_b > kCosineEps;
}

// Dim i's term of the distance sum (unit: cosine_unit(norm_a, norm_b), only read for cosine).
template <typename T>
FK_HOST_DEVICE FK_INLINE double distance_term(T ai, T bi, int metric, bool unit, double norm_a, double norm_b) {
  if (metric == kL2) {
    const double t = as_double(ai) - as_double(bi);
    return t * t;
  }
  if (unit) {
    // 1 - cos = |u_a - u_b|^2 / 2 for unit u: exactly 0 for equal directions (so they tie).
    const double t = as_double(ai) / norm_a - as_double(bi) / norm_b;
    return t * t;
  }
  return as_double(ai) * as_double(bi);
}

FK_HOST_DEVICE FK_INLINE double distance_from_sum(double s, int metric, double norm_a, double norm_b) {
  if (metric == kL2) return sqrt(s);
  if (cosine_unit(norm_a, norm_b)) return 0.5 * s;
  const double na = norm_a > kCosineEps ? norm_a : kCosineEps;
  const double nb = norm_b > kCosineEps ? norm_b : kCosineEps;
  return 1.0 - s / (na * nb);
}

// Sum over dims start, start + stride, ... of distance_term, in that order (one lane's share).
template <typename T>
FK_HOST_DEVICE FK_INLINE double distance_partial(const T* a, const T* b, int64_t d, int metric, double norm_a,
                                                 double norm_b, int64_t start, int64_t stride) {
  const bool unit = cosine_unit(norm_a, norm_b);
  double s = 0.0;
  for (int64_t i = start; i < d; i += stride) s += distance_term(a[i], b[i], metric, unit, norm_a, norm_b);
  return s;
}

template <typename T>
FK_HOST_DEVICE FK_INLINE double exact_distance(const T* a, const T* b, int64_t d, int metric, double norm_a,
                                               double norm_b) {
  return distance_from_sum(distance_partial(a, b, d, metric, norm_a, norm_b, 0, 1), metric, norm_a, norm_b);
}

// Warp-order sums. A warp of kLanes lanes sums per-dim terms as: lane l adds the terms of dims
// l, l + 32, ... in order, then the lanes combine by the xor butterfly (v += shfl_xor(v, o) for
// o = 16, 8, 4, 2, 1), which leaves every lane the same bits. lane_tree_sum is that combination on
// the host (p[l] + p[l + o] is what lane l adds; IEEE addition commutes, so lane l + o gets the same).
constexpr int kLanes = 32;

FK_HOST_DEVICE FK_INLINE double lane_tree_sum(double* p) {
  for (int o = kLanes / 2; o > 0; o /= 2)
    for (int l = 0; l < o; ++l) p[l] = p[l] + p[l + o];
  return p[0];
}

// The loss's deterministic sum of the C row terms, in the CUDA launcher's two passes: blocks of
// kSumThreads threads each reduce a fixed chunk of kSumChunk terms (thread t adds terms t, t + 256,
// ... of the chunk in order, then a halving tree part[t] += part[t + h]), and one block reduces the
// chunk sums the same way. block_tree_sum is one block's reduction on the host.
constexpr int kSumThreads = 256;
constexpr int64_t kSumChunk = 1024;

FK_HOST_DEVICE FK_INLINE double block_tree_sum(const double* x, int64_t n) {
  double part[kSumThreads];
  for (int t = 0; t < kSumThreads; ++t) part[t] = 0.0;
  for (int64_t i = 0; i < n; ++i) part[i % kSumThreads] += x[i];
  for (int h = kSumThreads / 2; h > 0; h /= 2)
    for (int t = 0; t < h; ++t) part[t] += part[t + h];
  return part[0];
}

// exact_distance summed in warp order: the CPU's twin of a warp computing one pair with lanes over dims.
template <typename T>
FK_HOST_DEVICE FK_INLINE double lane_distance(const T* a, const T* b, int64_t d, int metric, double norm_a,
                                              double norm_b) {
  const bool unit = cosine_unit(norm_a, norm_b);
  double p[kLanes];
  for (int l = 0; l < kLanes; ++l) p[l] = 0.0;
  // Dims in rows of kLanes: p[l] gets dims l, l + 32, ... in order (the inner loop vectorises).
  int64_t i0 = 0;
  for (; i0 + kLanes <= d; i0 += kLanes)
    for (int l = 0; l < kLanes; ++l) p[l] += distance_term(a[i0 + l], b[i0 + l], metric, unit, norm_a, norm_b);
  for (int l = 0; i0 + l < d; ++l) p[l] += distance_term(a[i0 + l], b[i0 + l], metric, unit, norm_a, norm_b);
  return distance_from_sum(lane_tree_sum(p), metric, norm_a, norm_b);
}

// exact_distance(l2) of row a to the four rows ids[0..3] of w at once: the same operations per pair
// in the same order (so bit-identical), as four independent chains instead of one latency-bound one.
template <typename T>
FK_HOST_DEVICE FK_INLINE void exact_l2_x4(const T* a, const T* w, const int64_t* ids, int64_t d, double* out) {
  const T *b0 = w + ids[0] * d, *b1 = w + ids[1] * d, *b2 = w + ids[2] * d, *b3 = w + ids[3] * d;
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    const double x = as_double(a[i]);
    const double t0 = x - as_double(b0[i]), t1 = x - as_double(b1[i]);
    const double t2 = x - as_double(b2[i]), t3 = x - as_double(b3[i]);
    s0 += t0 * t0;
    s1 += t1 * t1;
    s2 += t2 * t2;
    s3 += t3 * t3;
  }
  out[0] = sqrt(s0);
  out[1] = sqrt(s1);
  out[2] = sqrt(s2);
  out[3] = sqrt(s3);
}

// Insertion sort of (exact, id) pairs by key_less, in place: entry s goes into the sorted prefix [0, s).
FK_HOST_DEVICE FK_INLINE void sort_candidates(double* exact, int64_t* ids, int64_t size) {
  for (int64_t s = 0, sorted = 0; s < size; ++s) {
    const double e = exact[s];
    const int64_t id = ids[s];
    candidate_insert(exact, ids, sorted, size, e, id);
  }
}

// Final pass of one row: recompute the true distance of each of its `size` candidates, order them by
// (distance, index) and write the first k. exact[] is scratch of at least `size` doubles.
template <typename T, typename OUT>
FK_HOST_DEVICE FK_INLINE void knn_finalize_row(const T* w, int64_t row, int64_t d, int metric, const double* norms,
                                               int64_t* cand_ids, int64_t size, double* exact, int64_t k, OUT* out_dist,
                                               int64_t* out_idx) {
  const T* a = w + row * d;
  const double na = metric == kCosine ? norms[row] : 0.0;
  int64_t s = 0;
  if (metric == kL2) {
    for (; s + 4 <= size; s += 4) exact_l2_x4(a, w, cand_ids + s, d, exact + s);
  }
  for (; s < size; ++s) {
    const int64_t j = cand_ids[s];
    exact[s] = exact_distance(a, w + j * d, d, metric, na, metric == kCosine ? norms[j] : 0.0);
  }
  sort_candidates(exact, cand_ids, size);
  for (int64_t s = 0; s < k; ++s) {
    out_dist[row * k + s] = static_cast<OUT>(exact[s]);
    out_idx[row * k + s] = cand_ids[s];
  }
}

// Exact fallback for one row: scan every other class with the float64 distance, keep the k smallest
// by (distance, index) in the scratch arrays exact[k], ids[k], and write them.
template <typename T, typename OUT>
FK_HOST_DEVICE FK_INLINE void knn_exact_row(const T* w, int64_t row, int64_t c, int64_t d, int metric,
                                            const double* norms, double* exact, int64_t* ids, int64_t k, OUT* out_dist,
                                            int64_t* out_idx) {
  const T* a = w + row * d;
  const double na = metric == kCosine ? norms[row] : 0.0;
  int64_t size = 0;
  for (int64_t j = 0; j < c; ++j) {
    if (j == row) continue;
    const double e = exact_distance(a, w + j * d, d, metric, na, metric == kCosine ? norms[j] : 0.0);
    if (size == k && !key_less(e, j, exact[k - 1], ids[k - 1])) continue;
    candidate_insert(exact, ids, size, k, e, j);
  }
  for (int64_t s = 0; s < k; ++s) {
    out_dist[row * k + s] = static_cast<OUT>(exact[s]);
    out_idx[row * k + s] = ids[s];
  }
}

// alpha for pair (row, col) from a CSR whose rows hold strictly increasing column ids; 1 if absent.
FK_HOST_DEVICE FK_INLINE float pair_weight_lookup(const int64_t* indptr, const int64_t* indices, const float* values,
                                                  int64_t row, int64_t col) {
  int64_t lo = indptr[row], hi = indptr[row + 1];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (indices[mid] < col)
      lo = mid + 1;
    else
      hi = mid;
  }
  return (lo < indptr[row + 1] && indices[lo] == col) ? values[lo] : 1.0f;
}

// One pair's hinge h = max(0, margin - dist) and its loss weight * h^2 (float64), from its distance.
// coef is dLoss/d(geometry) scaled so the row gradients below are linear in it:
//   l2:     coef = -2 weight h / dist  (0 when dist == 0: the norm's subgradient at 0),
//           dLoss/dw_c = coef (w_c - w_c'),  dLoss/dw_c' = coef (w_c' - w_c);
//   cosine: coef = 2 weight h (h grows with cos),  dLoss/dw_c = coef P_c(u_c') / n_c.
FK_HOST_DEVICE FK_INLINE double pair_term_from_distance(double dist, int metric, double weight, double margin,
                                                        double* coef) {
  const double h = margin - dist > 0.0 ? margin - dist : 0.0;
  if (metric == kL2) {
    *coef = (h > 0.0 && dist > 0.0) ? -2.0 * weight * h / dist : 0.0;
  } else {
    *coef = 2.0 * weight * h;
  }
  return weight * h * h;
}

// pair_term_from_distance of pair (c, cp), the distance summed in warp order (lane_distance), so the
// CPU's terms are bit-identical to the CUDA kernel's (a warp per row, lanes over dims).
template <typename T>
FK_HOST_DEVICE FK_INLINE double pair_term(const T* w, int64_t c, int64_t cp, int64_t d, int metric, const double* norms,
                                          double weight, double margin, double* coef) {
  const double dist = lane_distance(w + c * d, w + cp * d, d, metric, metric == kCosine ? norms[c] : 0.0,
                                    metric == kCosine ? norms[cp] : 0.0);
  return pair_term_from_distance(dist, metric, weight, margin, coef);
}

// Dim i of v = sum over row t's pairs (own, then reverse, in order) of coef * u_partner (cosine).
template <typename T>
FK_HOST_DEVICE FK_INLINE double cosine_partner_sum(const T* w, int64_t t, int64_t i, int64_t d, int64_t k,
                                                   const double* norms, const int64_t* nbr, const double* coefs,
                                                   const int64_t* rev_pairs, int64_t rev_begin, int64_t rev_end) {
  double v = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = nbr[t * k + j];
    const double np = norms[p] > kCosineEps ? norms[p] : kCosineEps;
    v += coefs[t * k + j] * as_double(w[p * d + i]) / np;
  }
  for (int64_t q = rev_begin; q < rev_end; ++q) {
    const int64_t pair = rev_pairs[q], r = pair / k;
    const double nr = norms[r] > kCosineEps ? norms[r] : kCosineEps;
    v += coefs[pair] * as_double(w[r * d + i]) / nr;
  }
  return v;
}

// Dim i's term of u_t . v (cosine, |w_t| > eps): the projection the row gradient needs, summed over
// dims in warp order (cosine_projection on the host, a warp reduction on CUDA).
template <typename T>
FK_HOST_DEVICE FK_INLINE double cosine_projection_term(const T* w, int64_t t, int64_t i, int64_t d, int64_t k,
                                                       const double* norms, const int64_t* nbr, const double* coefs,
                                                       const int64_t* rev_pairs, int64_t rev_begin, int64_t rev_end) {
  return cosine_partner_sum(w, t, i, d, k, norms, nbr, coefs, rev_pairs, rev_begin, rev_end) * as_double(w[t * d + i]) /
         norms[t];
}

// u_t . v for row t (0 unless cosine with |w_t| > eps), in warp order: the host twin of the CUDA kernel's.
template <typename T>
FK_HOST_DEVICE FK_INLINE double cosine_projection(const T* w, int64_t t, int64_t d, int64_t k, int metric,
                                                  const double* norms, const int64_t* nbr, const double* coefs,
                                                  const int64_t* rev_pairs, int64_t rev_begin, int64_t rev_end) {
  if (metric != kCosine || !(norms[t] > kCosineEps)) return 0.0;
  double p[kLanes];
  for (int l = 0; l < kLanes; ++l) p[l] = 0.0;
  for (int64_t i = 0; i < d; ++i)
    p[i % kLanes] += cosine_projection_term(w, t, i, d, k, norms, nbr, coefs, rev_pairs, rev_begin, rev_end);
  return lane_tree_sum(p);
}

// Gradient of row t over dims start, start + stride, ...: its own pairs (t, nbr[t, j]) and the reverse
// pairs (r, t) listed, in a fixed order, by rev_pairs[rev_begin .. rev_end) (flat pair ids r*k + j).
// coefs are per flat pair id, already multiplied by the incoming gradient; proj is u_t . v
// (cosine_projection, or its warp-reduced twin; 0 for l2). Each dim sums its pairs in order.
template <typename T, typename G>
FK_HOST_DEVICE FK_INLINE void pair_grad_row(const T* w, int64_t t, int64_t d, int64_t k, int metric,
                                            const double* norms, const int64_t* nbr, const double* coefs,
                                            const int64_t* rev_pairs, int64_t rev_begin, int64_t rev_end, G* grad,
                                            int64_t start, int64_t stride, double proj) {
  const T* wt = w + t * d;
  double nt = 1.0;
  if (metric == kCosine) {
    nt = norms[t] > kCosineEps ? norms[t] : kCosineEps;
  }
  for (int64_t i = start; i < d; i += stride) {
    double g = 0.0;
    if (metric == kL2) {
      const double x = as_double(wt[i]);
      for (int64_t j = 0; j < k; ++j) g += coefs[t * k + j] * (x - as_double(w[nbr[t * k + j] * d + i]));
      for (int64_t q = rev_begin; q < rev_end; ++q) {
        const int64_t pair = rev_pairs[q];
        g += coefs[pair] * (x - as_double(w[(pair / k) * d + i]));
      }
    } else {
      const double v = cosine_partner_sum(w, t, i, d, k, norms, nbr, coefs, rev_pairs, rev_begin, rev_end);
      // ds/dw_t = (v - (u_t . v) u_t) / n_t when |w_t| >= eps, else v / eps (u_t = w_t / eps is linear).
      g = (v - proj * as_double(wt[i]) / nt) / nt;
    }
    grad[t * d + i] = static_cast<G>(g);
  }
}

}  // namespace spread
}  // namespace fedkernels
