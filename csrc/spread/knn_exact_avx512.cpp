// AVX-512 final pass of the CPU knn_classes (float32 W): the float64 distances of a row's kept
// candidates, eight candidates per vector. Each lane performs exactly the operations of
// spread::exact_distance (l2: sum of (a - b)^2 then sqrt; cosine: sum of (a / |a| - b / |b|)^2 then
// / 2), in the same dim order, without FMA (the build uses -ffp-contract=off), so the bits match the
// scalar path. The win is cosine's two float64 divisions per dim and candidate: a / |a| is computed
// once per row and b / |b| eight lanes per vdivpd instead of one divsd each.
#include "spread/knn_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FK_KNN_EXACT_AVX512 1
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define FK_KNN_EXACT_AVX512 0
#endif

namespace fedkernels {
namespace spread_cpu {

#if FK_KNN_EXACT_AVX512

namespace {

constexpr int64_t kLanes = 8;

// Lanes l < n: (ids[l] * d) (rows of the candidates); lanes past n repeat lane n - 1 (results unused).
__attribute__((target("avx512f"))) __m512i row_offsets(const int64_t* ids, int64_t n, int64_t d) {
  alignas(64) int64_t off[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) off[l] = ids[std::min(l, n - 1)] * d;
  return _mm512_load_si512(off);
}

__attribute__((target("avx512f"))) void l2_group(const float* a, const float* w, const int64_t* ids, int64_t n,
                                                 int64_t d, double* out) {
  const __m512i off = row_offsets(ids, n, d);
  __m512d s = _mm512_setzero_pd();
  for (int64_t q = 0; q < d; ++q) {
    const __m512d b = _mm512_cvtps_pd(_mm512_i64gather_ps(off, w + q, 4));
    const __m512d t = _mm512_sub_pd(_mm512_set1_pd(static_cast<double>(a[q])), b);
    s = _mm512_add_pd(s, _mm512_mul_pd(t, t));
  }
  alignas(64) double r[kLanes];
  _mm512_store_pd(r, _mm512_sqrt_pd(s));
  for (int64_t l = 0; l < n; ++l) out[l] = r[l];
}

// ua: the row's a / |a| in float64. Lanes whose candidate norm is not above kCosineEps take the
// scalar path (their distance is 1 - a.b / (clamped norms), not the unit-vector form).
__attribute__((target("avx512f"))) void cosine_group(const float* a, const double* ua, double na, const float* w,
                                                     const double* norms, const int64_t* ids, int64_t n, int64_t d,
                                                     double* out) {
  const __m512i off = row_offsets(ids, n, d);
  alignas(64) double nbs[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) nbs[l] = norms[ids[std::min(l, n - 1)]];
  const __m512d nb = _mm512_load_pd(nbs);
  __m512d s = _mm512_setzero_pd();
  for (int64_t q = 0; q < d; ++q) {
    const __m512d b = _mm512_cvtps_pd(_mm512_i64gather_ps(off, w + q, 4));
    const __m512d t = _mm512_sub_pd(_mm512_set1_pd(ua[q]), _mm512_div_pd(b, nb));
    s = _mm512_add_pd(s, _mm512_mul_pd(t, t));
  }
  alignas(64) double r[kLanes];
  _mm512_store_pd(r, _mm512_mul_pd(_mm512_set1_pd(0.5), s));
  for (int64_t l = 0; l < n; ++l) {
    out[l] = spread::cosine_unit(na, nbs[l])
                 ? r[l]
                 : spread::exact_distance(a, w + ids[l] * d, d, spread::kCosine, na, nbs[l]);
  }
}

}  // namespace

void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                               const int64_t* ids, int64_t size, double* ua, double* exact) {
  const float* a = w + row * d;
  if (metric == spread::kL2) {
    for (int64_t s = 0; s < size; s += kLanes) l2_group(a, w, ids + s, std::min(kLanes, size - s), d, exact + s);
    return;
  }
  const double na = norms[row];
  if (!(na > spread::kCosineEps)) {  // no unit form for this row: the scalar path throughout
    for (int64_t s = 0; s < size; ++s)
      exact[s] = spread::exact_distance(a, w + ids[s] * d, d, metric, na, norms[ids[s]]);
    return;
  }
  for (int64_t q = 0; q < d; ++q) ua[q] = static_cast<double>(a[q]) / na;
  for (int64_t s = 0; s < size; s += kLanes)
    cosine_group(a, ua, na, w, norms, ids + s, std::min(kLanes, size - s), d, exact + s);
}

#else

void exact_candidate_distances(const float*, int64_t, int64_t, int, const double*, const int64_t*, int64_t, double*,
                               double*) {}

#endif

}  // namespace spread_cpu
}  // namespace fedkernels
