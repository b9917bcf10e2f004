// Host-only: the running per-row candidate lists of the CPU knn_classes (see spread.h for the
// exactness argument). Shared by the BLAS tile path (spread_cpu.cpp) and the fused AVX-512 tile
// path (knn_tiles_avx512.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "spread/spread.h"

namespace fedkernels {
namespace spread_cpu {

constexpr int64_t kChunk = 64;  // keys tested together before any per-entry branching

template <typename ACC>
struct Candidates {
  int64_t k, cap;
  int64_t ld;  // row stride of keys and ids: cap rounded up to 16 (entries past a row's size are unused)
  int metric;
  const ACC* col_term;  // l2: |w_j|^2; cosine: -1 / |w_j|
  std::vector<ACC> keys, bands;
  std::vector<ACC> gates;  // gate(i), kept current by offer() (only the fused path reads it)
  std::vector<int64_t> ids, sizes;
  std::vector<char> overflow;

  void init(int64_t c, int64_t k_, int64_t cap_, int metric_, const ACC* col_term_) {
    k = k_;
    cap = cap_;
    ld = (cap + 15) / 16 * 16;  // whole vectors for the AVX-512 insertion (knn_tiles_avx512.cpp)
    metric = metric_;
    col_term = col_term_;
    keys.assign(static_cast<size_t>(c * ld), std::numeric_limits<ACC>::infinity());
    ids.assign(static_cast<size_t>(c * ld), 0);
    sizes.assign(static_cast<size_t>(c), 0);
    overflow.assign(static_cast<size_t>(c), 0);
    bands.resize(static_cast<size_t>(c));
    gates.assign(static_cast<size_t>(c), std::numeric_limits<ACC>::infinity());
  }

  // Keys above this can neither be among the row's true k nearest nor signal an overflow: the k-th
  // kept key plus the band (spread.h), once the row holds k. Entries kept beyond it are slack for
  // near-ties only, so the list need not hold the cap smallest keys (the float64 final pass picks the
  // k nearest among the kept keys within the band either way). A gate at the k-th rather than the
  // cap-th key means about k (1 + ln(C / k)) offers per row instead of cap (1 + ln(C / cap)).
  ACC gate(int64_t i) const {
    if (sizes[i] < k) return std::numeric_limits<ACC>::infinity();
    return keys[i * ld + k - 1] + bands[i];
  }

  // Offer row i one key of column j: the per-entry logic of scan() below, for keys that passed a
  // (possibly stale, hence larger) gate test elsewhere.
  void offer(int64_t i, ACC key, int64_t j) {
    if (!(key <= gates[i]) || j == i) return;
    ACC* kr = keys.data() + i * ld;
    int64_t& sz = sizes[i];
    if (sz == cap && key > kr[cap - 1]) {
      overflow[i] = 1;  // a near-tie of the k-th that the list cannot hold
      return;
    }
    bool of = false;
    spread::candidate_offer(kr, ids.data() + i * ld, sz, cap, k, bands[i], key, j, of);
    if (of) overflow[i] = 1;
    gates[i] = gate(i);
  }

  // Offer row i the keys of columns col0 .. col0 + n from one row of a GEMM tile.
  void scan(int64_t i, const ACC* g, int64_t col0, int64_t n) {
    ACC* kr = keys.data() + i * ld;
    int64_t* ir = ids.data() + i * ld;
    int64_t& sz = sizes[i];
    bool of = overflow[i];
    ACC gt = gate(i);
    const ACC* ct = col_term + col0;
    for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
      const int64_t m = std::min(kChunk, n - j0);
      ACC kk[kChunk];
      ACC mn = std::numeric_limits<ACC>::infinity();
      if (metric == spread::kL2) {
#pragma omp simd reduction(min : mn)
        for (int64_t t = 0; t < m; ++t) {
          kk[t] = ct[j0 + t] - ACC(2) * g[j0 + t];
          mn = kk[t] < mn ? kk[t] : mn;
        }
      } else {
#pragma omp simd reduction(min : mn)
        for (int64_t t = 0; t < m; ++t) {
          kk[t] = ct[j0 + t] * g[j0 + t];
          mn = kk[t] < mn ? kk[t] : mn;
        }
      }
      if (mn > gt) continue;
      for (int64_t t = 0; t < m; ++t) {
        const int64_t j = col0 + j0 + t;
        if (kk[t] > gt || j == i) continue;
        if (sz == cap && kk[t] > kr[cap - 1]) {
          of = true;  // a near-tie of the k-th that the list cannot hold
          continue;
        }
        spread::candidate_offer(kr, ir, sz, cap, k, bands[i], kk[t], j, of);
        gt = gate(i);
      }
    }
    overflow[i] = of;
    gates[i] = gt;
  }
};

}  // namespace spread_cpu
}  // namespace fedkernels
