// Host-only: the row loop of the CPU scatter_rows_mean (scatter_rows_mean_cpu.cpp), in a header
// without torch so each CPU level builds it in its own unit (scatter_rows_mean_body_x86.h). Output
// rows sum their sources (sorted by row, stable) with sampled.h's per-row math.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/cpu_isa.h"
#include "common/stream_store.h"
#include "sampled/sampled.h"

namespace fedkernels {
namespace scatter_cpu {

// What the row loop reads and writes: segment u (sources perm[seg[u]..seg[u+1])) becomes out row rows[u].
template <typename scalar_t, typename acc_t>
struct ScatterJob {
  scalar_t* out;
  const scalar_t* src;
  const int64_t* rows;
  const int64_t* seg;
  const int64_t* perm;
  const acc_t* w;
  const acc_t* wsum;    // [U] sum of the row's scaled weights
  const acc_t* wscale;  // [U] the row's weight scale (sampled.h: row_weight_scale)
  int64_t d;
};

// Sources are gathered in perm order, each a random row of src that no hardware prefetcher can
// guess: ask for the row kAhead sources on while this one is summed, so several rows are in flight.
constexpr int64_t kAhead = 8;

template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t d) {
  const char* p = reinterpret_cast<const char*>(row);
  const char* end = reinterpret_cast<const char*>(row + d);
  for (; p < end; p += 64) __builtin_prefetch(p, 0, 0);  // read once: non-temporal hint
}

// Rows u in [u0, u1). Single-source rows go straight to out; longer ones start acc with their first
// source and fold the last one into the division, the same operations as zero / add all / divide.
// kStream: each out row is computed into `row` (d elements, in L1) and streamed to out from there.
// Always inlined: the level builds below only vectorise what is inlined into them.
template <bool kStream, typename scalar_t, typename acc_t>
inline __attribute__((always_inline)) void mean_rows(const ScatterJob<scalar_t, acc_t>& j, int64_t u0, int64_t u1,
                                                     acc_t* acc, scalar_t* row) {
  const int64_t d = j.d;
  const int64_t t_begin = j.seg[u0], t_end = j.seg[u1];
  for (int64_t t = t_begin; t < std::min(t_end, t_begin + kAhead); ++t) prefetch_row(j.src + j.perm[t] * d, d);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t s0 = j.seg[u], s1 = j.seg[u + 1];
    scalar_t* o = j.out + j.rows[u] * d;
    const acc_t ws = j.wsum[u], sc = j.wscale[u];
    for (int64_t t = s0; t < s1; ++t) {
      if (t + kAhead < t_end) prefetch_row(j.src + j.perm[t + kAhead] * d, d);
      const int64_t p = j.perm[t];
      const scalar_t* x = j.src + p * d;
      const acc_t w = j.w[p] * sc;
      if (s1 - s0 == 1) {
        if constexpr (kStream) {
          weighted_row_only(row, x, w, ws, d, 0, 1);
          stream_copy_row(o, row, d);
        } else {
          weighted_row_only(o, x, w, ws, d, 0, 1);
        }
      } else if (t == s0) {
        weighted_row_first(acc, x, w, d, 0, 1);
      } else if (t + 1 < s1) {
        weighted_row_accumulate(acc, x, w, d, 0, 1);
      } else if constexpr (kStream) {
        weighted_row_last(row, acc, x, w, ws, d, 0, 1);
        stream_copy_row(o, row, d);
      } else {
        weighted_row_last(o, acc, x, w, ws, d, 0, 1);
      }
    }
  }
  if constexpr (kStream) stream_store_fence();
}

// The loop for the two hot dtypes (float, double: acc is 2 d elements, the accumulator and the row
// to stream), as each level's build runs it.
template <typename T>
inline __attribute__((always_inline)) void mean_rows_dtype(const ScatterJob<T, T>& j, int64_t u0, int64_t u1, T* acc,
                                                           bool stream) {
  stream ? mean_rows<true>(j, u0, u1, acc, acc + j.d) : mean_rows<false>(j, u0, u1, acc, acc + j.d);
}

#if FK_X86_LEVELS
// The avx2 level's build (scatter_rows_mean_avx2.cpp: scatter_rows_mean_body_x86.h), mean_rows_dtype's contract.
namespace avx2 {
void run_rows(const ScatterJob<float, float>& j, int64_t u0, int64_t u1, float* acc, bool stream);
void run_rows(const ScatterJob<double, double>& j, int64_t u0, int64_t u1, double* acc, bool stream);
}  // namespace avx2
#endif

}  // namespace scatter_cpu
}  // namespace fedkernels
