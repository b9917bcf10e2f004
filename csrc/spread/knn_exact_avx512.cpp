// AVX-512 final pass of the CPU knn_classes (float32 W): the float64 distances of a row's kept
// candidates, sixteen candidates per panel (two vectors of eight float64 lanes). Each lane performs
// exactly the operations of spread::exact_distance (l2: sum of (a - b)^2 then sqrt; cosine: sum of
// (a / |a| - b / |b|)^2 then / 2), in the same dim order, without FMA (the build uses
// -ffp-contract=off), so the bits match the scalar path. A lane needs one candidate's dims in order,
// but a candidate's row is contiguous in W: sixteen rows are loaded sixteen dims at a time and
// transposed in registers (no gathers), and each lane then runs its own sequential sum. Cosine reads
// b / |b| from a precomputed float64 copy of the unit rows where the caller has one (two 8 x 8
// transposes per eight dims), else divides in the loop (eight lanes per vdivpd).
#include "spread/knn_tiles.h"

#include <algorithm>

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

constexpr int64_t kPanel = 16;  // candidates per panel: 16 float32 lanes, two float64 vectors

// r[l] := the 16 floats at rows[l] (masked to the first nq), transposed in place: afterwards lane l
// of r[q] is rows[l][q]. Two in-lane shuffle stages and two 128-bit lane stages.
__attribute__((target("avx512f"))) inline void load_transposed_16x16(const float* const* rows, __mmask16 qm,
                                                                     __m512* r) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_ps(qm, rows[i]);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // r[4i + m]: rows 4i..4i+3 of dims m, m + 4, m + 8, m + 12
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 u = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88), v = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
    const __m512 x = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
    const __m512 y = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
    t[m] = _mm512_shuffle_f32x4(u, x, 0x88);
    t[m + 4] = _mm512_shuffle_f32x4(v, y, 0x88);
    t[m + 8] = _mm512_shuffle_f32x4(u, x, 0xDD);
    t[m + 12] = _mm512_shuffle_f32x4(v, y, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// r[l] := the 8 doubles at rows[l] (masked to the first nq), transposed: lane l of r[q] is rows[l][q].
__attribute__((target("avx512f"))) inline void load_transposed_8x8(const double* const* rows, __mmask8 qm, __m512d* r) {
  __m512d t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm512_maskz_loadu_pd(qm, rows[i]);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);  // rows 2i, 2i+1 of dims 0, 2, 4, 6 (pairs)
    t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // r[4i + m]: rows 4i..4i+3, dims m and m + 4 in its two halves
    r[4 * i] = _mm512_permutex2var_pd(t[4 * i], lo, t[4 * i + 2]);
    r[4 * i + 1] = _mm512_permutex2var_pd(t[4 * i + 1], lo, t[4 * i + 3]);
    r[4 * i + 2] = _mm512_permutex2var_pd(t[4 * i], hi, t[4 * i + 2]);
    r[4 * i + 3] = _mm512_permutex2var_pd(t[4 * i + 1], hi, t[4 * i + 3]);
  }
  const __m512i lo2 = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0), hi2 = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm512_permutex2var_pd(r[m], lo2, r[4 + m]);
    t[m + 4] = _mm512_permutex2var_pd(r[m], hi2, r[4 + m]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// Rows of the panel's candidates; lanes past n repeat the last one (their results are unused).
template <typename T>
inline void panel_rows(const T* base, const int64_t* ids, int64_t n, int64_t d, int64_t lanes, const T** rows) {
  for (int64_t l = 0; l < lanes; ++l) rows[l] = base + ids[std::min(l, n - 1)] * d;
}

// What float_panel_sums adds per dim: (x_q - b_q)^2 with x = the row's a (l2), the same with x = a / |a|
// and b / |b| formed per dim (cosine without unit rows), or b_q^2 (squared norms of the panel's rows).
enum PanelSum { kDiff, kDivide, kSquare };

// Sum over dims, in order, of the PanelSum term for the panel's 16 candidates b. s0: lanes 0-7, s1: 8-15.
template <PanelSum kSum>
__attribute__((target("avx512f"))) void float_panel_sums(const double* x, const float* w, const int64_t* ids, int64_t n,
                                                         int64_t d, const double* nb_lanes, __m512d& s0, __m512d& s1) {
  const float* rows[kPanel];
  panel_rows(w, ids, n, d, kPanel, rows);
  __m512d nb0 = _mm512_setzero_pd(), nb1 = nb0;
  if (kSum == kDivide) {
    nb0 = _mm512_loadu_pd(nb_lanes);
    nb1 = _mm512_loadu_pd(nb_lanes + 8);
  }
  s0 = _mm512_setzero_pd();
  s1 = _mm512_setzero_pd();
  for (int64_t q0 = 0; q0 < d; q0 += 16) {
    const int64_t nq = std::min<int64_t>(16, d - q0);
    __m512 col[16];
    load_transposed_16x16(rows, static_cast<__mmask16>(nq >= 16 ? 0xFFFF : (1u << nq) - 1), col);
    for (int l = 0; l < kPanel; ++l) rows[l] += 16;
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) {
      if (q < nq) {
        __m512d b0 = _mm512_cvtps_pd(_mm512_castps512_ps256(col[q]));
        __m512d b1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(col[q]), 1)));
        if (kSum == kDivide) {
          b0 = _mm512_div_pd(b0, nb0);
          b1 = _mm512_div_pd(b1, nb1);
        }
        if (kSum == kSquare) {
          s0 = _mm512_add_pd(s0, _mm512_mul_pd(b0, b0));
          s1 = _mm512_add_pd(s1, _mm512_mul_pd(b1, b1));
        } else {
          const __m512d xq = _mm512_set1_pd(x[q0 + q]);
          const __m512d t0 = _mm512_sub_pd(xq, b0), t1 = _mm512_sub_pd(xq, b1);
          s0 = _mm512_add_pd(s0, _mm512_mul_pd(t0, t0));
          s1 = _mm512_add_pd(s1, _mm512_mul_pd(t1, t1));
        }
      }
    }
  }
}

// The same sum from float64 unit rows: x = a / |a|, b / |b| read from `unit` (cosine, small C).
__attribute__((target("avx512f"))) void unit_panel_sums(const double* x, const double* unit, const int64_t* ids,
                                                        int64_t n, int64_t d, __m512d& s0, __m512d& s1) {
  const double* rows[kPanel];
  panel_rows(unit, ids, n, d, kPanel, rows);
  s0 = _mm512_setzero_pd();
  s1 = _mm512_setzero_pd();
  for (int64_t q0 = 0; q0 < d; q0 += 8) {
    const int64_t nq = std::min<int64_t>(8, d - q0);
    const __mmask8 qm = static_cast<__mmask8>(nq >= 8 ? 0xFF : (1u << nq) - 1);
    __m512d c0[8], c1[8];
    load_transposed_8x8(rows, qm, c0);
    load_transposed_8x8(rows + 8, qm, c1);
    for (int l = 0; l < kPanel; ++l) rows[l] += 8;
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      if (q < nq) {
        const __m512d xq = _mm512_set1_pd(x[q0 + q]);
        const __m512d t0 = _mm512_sub_pd(xq, c0[q]), t1 = _mm512_sub_pd(xq, c1[q]);
        s0 = _mm512_add_pd(s0, _mm512_mul_pd(t0, t0));
        s1 = _mm512_add_pd(s1, _mm512_mul_pd(t1, t1));
      }
    }
  }
}

// Lanes [0, n) of the panel sums through `finish` (sqrt for l2, * 0.5 for cosine) into out.
__attribute__((target("avx512f"))) void store_panel(__m512d s0, __m512d s1, bool l2, int64_t n, double* out) {
  alignas(64) double r[kPanel];
  const __m512d half = _mm512_set1_pd(0.5);
  _mm512_store_pd(r, l2 ? _mm512_sqrt_pd(s0) : _mm512_mul_pd(half, s0));
  _mm512_store_pd(r + 8, l2 ? _mm512_sqrt_pd(s1) : _mm512_mul_pd(half, s1));
  for (int64_t l = 0; l < n; ++l) out[l] = r[l];
}

}  // namespace

__attribute__((target("avx512f"))) void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric,
                                                                  const double* norms, const double* unit,
                                                                  const int64_t* ids, int64_t size, double* xa,
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
  for (int64_t s = 0; s < size; s += kPanel) {
    const int64_t n = std::min(kPanel, size - s);
    __m512d s0, s1;
    double nbs[kPanel];
    if (metric == spread::kL2) {
      float_panel_sums<kDiff>(xa, w, ids + s, n, d, nullptr, s0, s1);
    } else {
      for (int64_t l = 0; l < kPanel; ++l) nbs[l] = norms[ids[s + std::min(l, n - 1)]];
      if (unit != nullptr)
        unit_panel_sums(xa, unit, ids + s, n, d, s0, s1);
      else
        float_panel_sums<kDivide>(xa, w, ids + s, n, d, nbs, s0, s1);
    }
    store_panel(s0, s1, metric == spread::kL2, n, exact + s);
    if (metric == spread::kL2) continue;
    for (int64_t l = 0; l < n; ++l) {  // a zero candidate has no unit form: 1 - a.b / (clamped norms)
      if (!spread::cosine_unit(na, nbs[l]))
        exact[s + l] = spread::exact_distance(a, w + ids[s + l] * d, d, metric, na, nbs[l]);
    }
  }
}

// Lanes are rows: sixteen rows' sums of x^2 run side by side, each in dim order (spread::row_sq_norm).
__attribute__((target("avx512f"))) void row_sq_norms(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq) {
  for (int64_t i0 = r0; i0 < r1; i0 += kPanel) {
    const int64_t n = std::min(kPanel, r1 - i0);
    int64_t ids[kPanel];
    for (int64_t l = 0; l < kPanel; ++l) ids[l] = i0 + l;
    __m512d s0, s1;
    float_panel_sums<kSquare>(nullptr, w, ids, n, d, nullptr, s0, s1);
    alignas(64) double r[kPanel];
    _mm512_store_pd(r, s0);
    _mm512_store_pd(r + 8, s1);
    for (int64_t l = 0; l < n; ++l) sq[i0 + l] = r[l];
  }
}

__attribute__((target("avx512f"))) void unit_rows(const float* w, int64_t r0, int64_t r1, int64_t d,
                                                  const double* norms, double* unit) {
  for (int64_t i = r0; i < r1; ++i) {
    if (!(norms[i] > spread::kCosineEps)) continue;
    const __m512d n = _mm512_set1_pd(norms[i]);
    const float* a = w + i * d;
    double* u = unit + i * d;
    for (int64_t q = 0; q < d; q += 8) {
      const __mmask8 m = static_cast<__mmask8>(d - q >= 8 ? 0xFF : (1u << (d - q)) - 1);
      const __m512d x = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m, a + q)));
      _mm512_mask_storeu_pd(u + q, m, _mm512_div_pd(x, n));
    }
  }
}

#else

void exact_candidate_distances(const float*, int64_t, int64_t, int, const double*, const double*, const int64_t*,
                               int64_t, double*, double*) {}
void row_sq_norms(const float*, int64_t, int64_t, int64_t, double*) {}
void unit_rows(const float*, int64_t, int64_t, int64_t, const double*, double*) {}

#endif

}  // namespace spread_cpu
}  // namespace fedkernels
