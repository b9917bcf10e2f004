// The vector final pass of the CPU knn_classes (float32 W), one body for every x86 level: included by
// knn_exact_avx2.cpp and knn_exact_avx512.cpp with FK_LEVEL defined (common/simd_levels_x86.h).
// The float64 distances of a row's kept candidates. Each lane performs exactly the operations of
// spread::exact_distance (l2: sum of (a - b)^2 then sqrt; cosine: sum of (a / |a| - b / |b|)^2 then
// / 2), in the same dim order, without FMA (the build uses -ffp-contract=off), so every level gives
// the scalar path's bits. A lane needs one candidate's dims in order while a candidate's row is
// contiguous in W, so groups of four candidate rows are loaded eight dims at a time and transposed in
// registers (no gathers); one pass over the dims runs up to four groups (sixteen candidates), each
// lane its own sequential sum. The groups are 256-bit at every level: on AMD Zen 4 a 512-bit shuffle
// or conversion costs two 256-bit ones, and four-candidate groups waste fewer lanes on the usual
// k + 1 candidates than sixteen-lane panels; the levels differ only in their masked loads for the
// last dims (and the width of unit_rows). Cosine reads b / |b| from float64 unit rows where the
// caller has them, else divides in the loop.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including knn_exact_body_x86.h"
#endif

#include <algorithm>
#include <cmath>

#include "common/simd_levels_x86.h"
#include "spread/knn_tiles.h"

#if FK_X86_LEVELS
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace fedkernels {
namespace spread_cpu {
namespace FK_LEVEL {

namespace {

using V = simd::FK_LEVEL;  // what differs between the levels

constexpr int64_t kGroup = 4;  // candidates per group: four float64 lanes
constexpr int kMaxGroups = 4;  // groups per pass over the dims

// What a lane adds per dim: (x_q - b_q)^2 with x = the row's a (l2), the same with x = a / |a| and
// b / |b| formed per dim (cosine without unit rows), or b_q^2 (squared norms of the group's rows).
enum Term { kDiff, kDivide, kSquare };

// c[q] (q < 8): lane l = rows[l][q0 + q] as float64, for the four float rows (dims past d read 0).
FK_LEVEL_TARGET inline void float_group(const float* const* rows, int64_t q0, int64_t d, __m256d* c) {
  __m256 r[4];
  if (q0 + 8 <= d) {
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) r[l] = _mm256_loadu_ps(rows[l] + q0);
  } else {
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) r[l] = V::load_first_f32x8(rows[l] + q0, d - q0);
  }
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  // u_m holds dims m (low 128 bits) and m + 4 (high), lanes = rows 0-3
  const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                       _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    c[m] = _mm256_cvtps_pd(_mm256_castps256_ps128(u[m]));
    c[m + 4] = _mm256_cvtps_pd(_mm256_extractf128_ps(u[m], 1));
  }
}

// c[q] (q < 4): lane l = rows[l][q0 + q], for the four double rows (dims past d read 0).
FK_LEVEL_TARGET inline void double_group(const double* const* rows, int64_t q0, int64_t d, __m256d* c) {
  __m256d r[4];
  if (q0 + 4 <= d) {
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) r[l] = _mm256_loadu_pd(rows[l] + q0);
  } else {
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) r[l] = V::load_first_f64x4(rows[l] + q0, d - q0);
  }
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  c[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  c[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  c[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  c[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

// Lane sums over all dims, in order, for kGroups groups of four rows (rows[g * 4 + l]); acc[g] lane l.
// x: the row's float64 operand (unused for kSquare); nb[g]: the groups' norms (kDivide).
template <Term kTerm, int kGroups>
FK_LEVEL_TARGET void float_sums(const double* x, const float* const* rows, int64_t d, const __m256d* nb, __m256d* acc) {
#pragma GCC unroll 4
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_setzero_pd();
  for (int64_t q0 = 0; q0 < d; q0 += 8) {
    __m256d c[kGroups][8];
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) float_group(rows + g * kGroup, q0, d, c[g]);
    const int64_t nq = std::min<int64_t>(8, d - q0);
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      if (q >= nq) break;
      const __m256d xq = kTerm == kSquare ? _mm256_setzero_pd() : _mm256_set1_pd(x[q0 + q]);
#pragma GCC unroll 4
      for (int g = 0; g < kGroups; ++g) {
        if (kTerm == kSquare) {
          acc[g] = _mm256_add_pd(acc[g], _mm256_mul_pd(c[g][q], c[g][q]));
        } else {
          const __m256d b = kTerm == kDivide ? _mm256_div_pd(c[g][q], nb[g]) : c[g][q];
          const __m256d t = _mm256_sub_pd(xq, b);
          acc[g] = _mm256_add_pd(acc[g], _mm256_mul_pd(t, t));
        }
      }
    }
  }
}

// The same sums of (x_q - u_q)^2 over float64 unit rows u (cosine with unit rows).
template <int kGroups>
FK_LEVEL_TARGET void unit_sums(const double* x, const double* const* rows, int64_t d, __m256d* acc) {
#pragma GCC unroll 4
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_setzero_pd();
  for (int64_t q0 = 0; q0 < d; q0 += 4) {
    __m256d c[kGroups][4];
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) double_group(rows + g * kGroup, q0, d, c[g]);
    const int64_t nq = std::min<int64_t>(4, d - q0);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      if (q >= nq) break;
      const __m256d xq = _mm256_set1_pd(x[q0 + q]);
#pragma GCC unroll 4
      for (int g = 0; g < kGroups; ++g) {
        const __m256d t = _mm256_sub_pd(xq, c[g][q]);
        acc[g] = _mm256_add_pd(acc[g], _mm256_mul_pd(t, t));
      }
    }
  }
}

// Sums of up to sixteen candidates `ids` (n of them) into sums[0 .. n): one pass over the dims with
// ceil(n / 4) groups. Lanes past n repeat the last candidate (their sums are not stored).
template <Term kTerm>
FK_LEVEL_TARGET void candidate_sums(const double* x, const float* w, const double* unit, const double* norms,
                                    const int64_t* ids, int64_t n, int64_t d, double* sums) {
  const float* rows[kGroup * kMaxGroups];
  const double* urows[kGroup * kMaxGroups];
  __m256d nb[kMaxGroups], acc[kMaxGroups];
  alignas(32) double nbs[kGroup * kMaxGroups] = {};
  for (int64_t l = 0; l < kGroup * kMaxGroups; ++l) {
    const int64_t j = ids[std::min(l, n - 1)];
    rows[l] = w + j * d;
    if (unit != nullptr) urows[l] = unit + j * d;
    if (kTerm == kDivide) nbs[l] = norms[j];
  }
  for (int g = 0; g < kMaxGroups; ++g) nb[g] = _mm256_load_pd(nbs + kGroup * g);  // (read by kDivide only)
  const int64_t groups = (n + kGroup - 1) / kGroup;
  if (unit != nullptr) {
    if (groups == 1) unit_sums<1>(x, urows, d, acc);
    if (groups == 2) unit_sums<2>(x, urows, d, acc);
    if (groups == 3) unit_sums<3>(x, urows, d, acc);
    if (groups == 4) unit_sums<4>(x, urows, d, acc);
  } else {
    if (groups == 1) float_sums<kTerm, 1>(x, rows, d, nb, acc);
    if (groups == 2) float_sums<kTerm, 2>(x, rows, d, nb, acc);
    if (groups == 3) float_sums<kTerm, 3>(x, rows, d, nb, acc);
    if (groups == 4) float_sums<kTerm, 4>(x, rows, d, nb, acc);
  }
  alignas(32) double r[kGroup * kMaxGroups];
  for (int64_t g = 0; g < groups; ++g) _mm256_store_pd(r + kGroup * g, acc[g]);
  std::copy(r, r + n, sums);
}

}  // namespace

FK_LEVEL_TARGET void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                                               const double* unit, const int64_t* ids, int64_t size, double* xa,
                                               double* exact) {
  const float* a = w + row * d;
  const double na = norms[row];
  if (metric == spread::kCosine && !(na > spread::kCosineEps)) {  // no unit form for this row: scalar throughout
    for (int64_t s = 0; s < size; ++s)
      exact[s] = spread::exact_distance(a, w + ids[s] * d, d, metric, na, norms[ids[s]]);
    return;
  }
  if (metric == spread::kL2) {
    for (int64_t q = 0; q < d; ++q) xa[q] = static_cast<double>(a[q]);
  } else if (unit != nullptr) {
    std::copy(unit + row * d, unit + (row + 1) * d, xa);
  } else {
    for (int64_t q = 0; q < d; ++q) xa[q] = static_cast<double>(a[q]) / na;
  }
  constexpr int64_t kPass = kGroup * kMaxGroups;
  for (int64_t s = 0; s < size; s += kPass) {
    const int64_t n = std::min(kPass, size - s);
    if (metric == spread::kL2) {
      candidate_sums<kDiff>(xa, w, nullptr, norms, ids + s, n, d, exact + s);
      for (int64_t l = 0; l < n; ++l) exact[s + l] = std::sqrt(exact[s + l]);
      continue;
    }
    candidate_sums<kDivide>(xa, w, unit, norms, ids + s, n, d, exact + s);
    for (int64_t l = 0; l < n; ++l) {
      const double nb = norms[ids[s + l]];
      // a zero candidate has no unit form: 1 - a.b / (clamped norms), as spread::distance_from_sum
      exact[s + l] = spread::cosine_unit(na, nb) ? 0.5 * exact[s + l]
                                                 : spread::exact_distance(a, w + ids[s + l] * d, d, metric, na, nb);
    }
  }
}

// Lanes are rows: sixteen rows' sums of x^2 run side by side, each in dim order (spread::row_sq_norm).
FK_LEVEL_TARGET void row_sq_norms(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq) {
  constexpr int64_t kPass = kGroup * kMaxGroups;
  for (int64_t i0 = r0; i0 < r1; i0 += kPass) {
    const int64_t n = std::min(kPass, r1 - i0);
    int64_t ids[kPass];
    for (int64_t l = 0; l < kPass; ++l) ids[l] = i0 + l;
    candidate_sums<kSquare>(nullptr, w, nullptr, nullptr, ids, n, d, sq + i0);
  }
}

FK_LEVEL_TARGET void unit_rows(const float* w, int64_t r0, int64_t r1, int64_t d, const double* norms, double* unit) {
  for (int64_t i = r0; i < r1; ++i) {
    if (!(norms[i] > spread::kCosineEps)) {  // no unit form (its lanes take the scalar path): zeros
      std::fill(unit + i * d, unit + (i + 1) * d, 0.0);
      continue;
    }
    const V::F64 n = V::f64_set1(norms[i]);
    const float* a = w + i * d;
    double* u = unit + i * d;
    int64_t q = 0;
    for (; q + V::kF64 <= d; q += V::kF64) V::f64_store(u + q, V::f64_div(V::f64_from_f32(a + q), n));
    if (q < d) V::f64_store_first(u + q, V::f64_div(V::f64_from_f32_first(a + q, d - q), n), d - q);
  }
}

}  // namespace FK_LEVEL
}  // namespace spread_cpu
}  // namespace fedkernels
#endif
