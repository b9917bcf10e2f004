// Host-only: the final pass of the CPU knn_classes (spread_cpu.cpp): each row's k nearest by
// (float64 distance, id) among its kept candidates, recomputed in float64 (spread.h), or an exact scan
// of all classes for a row whose list overflowed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "spread/knn_candidates.h"
#include "spread/knn_tiles.h"
#include "spread/spread.h"

namespace fedkernels {
namespace spread_cpu {

// A hint to fetch the cache line at p (a no-op where the compiler has no prefetch builtin).
inline void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p);
#endif
}

// Per-thread scratch of the final pass.
struct FinalScratch {
  std::vector<double> exact, xa;  // candidate distances; the row a in float64 (l2) or a / |a| (cosine)
  std::vector<int64_t> ids, todo;
};

// What finished rows of the vector final pass leave for later ones: distance(i, j) and distance(j, i)
// are the same float64 bits (each dim's term is a square of a difference or a product, summed in the
// same order), so a row takes a candidate's distance from that candidate's finished row when it lists
// the row among its own, instead of recomputing it: most cosine neighbour pairs are mutual, about a
// third of l2 ones. A row is read only after its flag is set (release / acquire), so threads may
// finish rows in any order; the bits do not depend on which side computed a pair.
struct FinalShare {
  int64_t ld;
  std::vector<double> exact;  // [C, ld]: a finished row's distances, in its sorted candidate order
  std::vector<int64_t> live;  // its number of recomputed candidates
  std::unique_ptr<std::atomic<char>[]> done;
  FinalShare(int64_t c, int64_t ld_)
      : ld(ld_), exact(static_cast<size_t>(c * ld_)), live(static_cast<size_t>(c)), done(new std::atomic<char>[c]) {
    for (int64_t i = 0; i < c; ++i) done[i].store(0, std::memory_order_relaxed);
  }
};

// Final pass of rows [r0, r1): the k nearest by (float64 distance, id) among each row's kept candidates,
// or an exact scan of all classes for a row whose list overflowed. vector: the level whose vector pass
// runs (float32 W; nullptr: the scalar pass, the same bits); unit: its cosine operand, float64 unit rows
// of all classes, or nullptr.
template <typename T, typename ACC>
void finalize_rows(const T* w, int64_t c, int64_t d, int64_t k, int metric, const std::vector<double>& norms,
                   const double* unit, const KnnLevel* vector, Candidates<ACC>& cand, FinalShare* share, int64_t r0,
                   int64_t r1, FinalScratch& s, ACC* out_dist, int64_t* out_idx) {
  s.exact.resize(static_cast<size_t>(2 * std::max(cand.cap, k)));
  s.ids.resize(static_cast<size_t>(std::max(cand.cap, k)));
  s.todo.resize(static_cast<size_t>(cand.cap));
  for (int64_t i = r0; i < r1; ++i) {
    if (cand.overflow[i] || cand.sizes[i] < k) {  // (a short list: keys that were not finite)
      spread::knn_exact_row(w, i, c, d, metric, norms.data(), s.exact.data(), s.ids.data(), k, out_dist, out_idx);
      continue;
    }
    int64_t* ids = cand.ids.data() + i * cand.ld;
    if constexpr (std::is_same_v<T, float>) {
      if (vector != nullptr) {  // same distances, bit for bit, sixteen candidates per pass
        s.xa.resize(static_cast<size_t>(d));
        // Only candidates keyed within the band of the k-th can be among the true k nearest (spread.h),
        // and the list holds all of them (else the row overflowed): the rest need no exact distance.
        const ACC* keys = cand.keys.data() + i * cand.ld;
        const ACC limit = keys[k - 1] + cand.bands[i];
        int64_t live = k;
        while (live < cand.sizes[i] && keys[live] <= limit) ++live;
        if (i + 1 < r1) {  // the next row's nearest candidates are scattered over W: fetch them now
          const int64_t* next = cand.ids.data() + (i + 1) * cand.ld;
          for (int64_t q = 0; q < std::min(cand.sizes[i + 1], k + 2); ++q)
            for (int64_t x = 0; x < d; x += 16) prefetch(w + next[q] * d + x);
        }
        double* exact = s.exact.data();
        int64_t todo = 0;  // candidates whose distance no finished row holds: s.ids, slots s.todo
        for (int64_t q = 0; q < live; ++q) {
          const int64_t j = ids[q];
          int64_t found = -1;
          if (share != nullptr && share->done[j].load(std::memory_order_acquire)) {
            const int64_t* jids = cand.ids.data() + j * cand.ld;
            for (int64_t t = 0; t < share->live[j]; ++t) found = jids[t] == i ? t : found;
          }
          if (found >= 0) {
            exact[q] = share->exact[j * share->ld + found];
          } else {
            s.ids[todo] = j;
            s.todo[todo++] = q;
          }
        }
        double* fresh = exact + std::max(cand.cap, k);
        vector->exact_candidate_distances(w, i, d, metric, norms.data(), unit, s.ids.data(), todo, s.xa.data(), fresh);
        for (int64_t t = 0; t < todo; ++t) exact[s.todo[t]] = fresh[t];
        spread::sort_candidates(exact, ids, live);
        for (int64_t q = 0; q < k; ++q) {
          out_dist[i * k + q] = static_cast<ACC>(exact[q]);
          out_idx[i * k + q] = ids[q];
        }
        if (share != nullptr) {
          std::copy(exact, exact + live, share->exact.data() + i * share->ld);
          share->live[i] = live;
          share->done[i].store(1, std::memory_order_release);
        }
        continue;
      }
    }
    spread::knn_finalize_row(w, i, d, metric, norms.data(), ids, cand.sizes[i], s.exact.data(), k, out_dist, out_idx);
  }
}

}  // namespace spread_cpu
}  // namespace fedkernels
