// avx2 row kernels of the CPU linear_cross_entropy (see lce_rows.h): the avx512 kernels' 16 lanes as
// two 8-lane halves, with the same operations per lane, so the bits equal the avx512 level's: the
// same exp (FMA polynomial; scalef's single rounding of p * 2^n as two exact-then-rounded power-of-two
// multiplies), the same per-lane max and sum, and the same 16-lane sum tree (lce_rows_x86.h). Whole
// 16-column steps run unmasked; the last partial step goes through a zero-padded copy whose padding
// lanes are left out of the max and the sum.
#include "sampled/lce_rows.h"
#include "sampled/lce_rows_x86.h"

#include <algorithm>
#include <cmath>

#if FK_X86_LEVELS
namespace fedkernels {
namespace lce_avx2 {

namespace {

using namespace lce_x86;

FK_TARGET_AVX2 inline __m256 exp8(__m256 x) {
  // max/min take the second operand when one is NaN, so a NaN x stays NaN.
  x = _mm256_max_ps(_mm256_set1_ps(kExpLo), x);
  x = _mm256_min_ps(_mm256_set1_ps(kExpHi), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // p * 2^n rounded once, as scalef: n is in [-150, 128], so 2^n = 2^n1 * 2^n2 with n1 = floor(n / 2)
  // and n2 = n - n1 both normal; p (in [0.7, 1.5]) * 2^n1 is then exact and the second multiply rounds
  // (into the subnormals, or to inf, as scalef). A NaN x makes p NaN, whatever n converts to.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// scale * z + bias for the 8 columns at j (the multiply and the add rounded apart, as lce_finish_logits).
FK_TARGET_AVX2 inline __m256 finish8(__m256 z, const float* bias, int64_t j, __m256 vscale) {
  const __m256 scaled = _mm256_mul_ps(vscale, z);
  return bias != nullptr ? _mm256_add_ps(scaled, _mm256_loadu_ps(bias + j)) : scaled;
}

// Lanes [0, live) of a 16-column step as all-ones masks (lo: lanes 0-7, hi: 8-15).
FK_TARGET_AVX2 inline void live_masks(int64_t live, __m256& lo, __m256& hi) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i n = _mm256_set1_epi32(static_cast<int>(live));
  lo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, idx));
  hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_add_epi32(idx, _mm256_set1_epi32(8))));
}

// The last, partial step's columns [j, cols) and bias, zero-padded to 16.
struct Tail {
  alignas(32) float z[16];
  alignas(32) float b[16];
  int64_t j, live;
  Tail(const float* src, const float* bias, int64_t cols) : j(cols / 16 * 16), live(cols - cols / 16 * 16) {
    std::fill(z, z + 16, 0.0f);
    std::fill(b, b + 16, 0.0f);
    std::copy(src + j, src + cols, z);
    if (bias != nullptr) std::copy(bias + j, bias + cols, b);
  }
};

}  // namespace

FK_TARGET_AVX2 LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols) {
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 max_lo = _mm256_set1_ps(-INFINITY), max_hi = max_lo;
  const int64_t whole = cols / 16 * 16;
  for (int64_t j = 0; j < whole; j += 16) {
    const __m256 lo = finish8(_mm256_loadu_ps(z + j), bias, j, vscale);
    const __m256 hi = finish8(_mm256_loadu_ps(z + j + 8), bias, j + 8, vscale);
    _mm256_storeu_ps(z + j, lo);
    _mm256_storeu_ps(z + j + 8, hi);
    max_lo = _mm256_max_ps(lo, max_lo);  // NaN lanes keep the running max, as lse_of_chunk's
    max_hi = _mm256_max_ps(hi, max_hi);
  }
  if (whole < cols) {
    Tail t(z, bias, cols);
    __m256 m_lo, m_hi;
    live_masks(t.live, m_lo, m_hi);
    const __m256 lo = finish8(_mm256_load_ps(t.z), bias ? t.b : nullptr, 0, vscale);
    const __m256 hi = finish8(_mm256_load_ps(t.z + 8), bias ? t.b : nullptr, 8, vscale);
    _mm256_store_ps(t.z, lo);
    _mm256_store_ps(t.z + 8, hi);
    std::copy(t.z, t.z + t.live, z + t.j);
    max_lo = _mm256_blendv_ps(max_lo, _mm256_max_ps(lo, max_lo), m_lo);
    max_hi = _mm256_blendv_ps(max_hi, _mm256_max_ps(hi, max_hi), m_hi);
  }
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, max_lo);
  _mm256_store_ps(lanes + 8, max_hi);
  float mx = -INFINITY;
  for (const float v : lanes) mx = std::max(mx, v);         // no lane is NaN: any order gives the same max
  if (mx == -INFINITY) return lse_of_chunk(z, cols, 0, 1);  // only -inf / NaN: the scalar rules
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 acc_lo = _mm256_setzero_ps(), acc_hi = acc_lo;
  for (int64_t j = 0; j < whole; j += 16) {
    acc_lo = _mm256_add_ps(acc_lo, exp8(_mm256_sub_ps(_mm256_loadu_ps(z + j), vm)));
    acc_hi = _mm256_add_ps(acc_hi, exp8(_mm256_sub_ps(_mm256_loadu_ps(z + j + 8), vm)));
  }
  if (whole < cols) {
    Tail t(z, nullptr, cols);
    __m256 m_lo, m_hi;
    live_masks(t.live, m_lo, m_hi);
    const __m256 e_lo = exp8(_mm256_sub_ps(_mm256_load_ps(t.z), vm));
    const __m256 e_hi = exp8(_mm256_sub_ps(_mm256_load_ps(t.z + 8), vm));
    acc_lo = _mm256_blendv_ps(acc_lo, _mm256_add_ps(acc_lo, e_lo), m_lo);
    acc_hi = _mm256_blendv_ps(acc_hi, _mm256_add_ps(acc_hi, e_hi), m_hi);
  }
  return LseState<float>{mx, hsum16(acc_lo, acc_hi)};
}

FK_TARGET_AVX2 void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                                   float g_lse, int64_t target_col) {
  const __m256 vscale = _mm256_set1_ps(scale), vlse = _mm256_set1_ps(lse), vcoef = _mm256_set1_ps(g_loss + g_lse);
  const int64_t whole = cols / 8 * 8;
  for (int64_t j = 0; j < whole; j += 8) {
    const __m256 v = finish8(_mm256_loadu_ps(z + j), bias, j, vscale);
    _mm256_storeu_ps(z + j, _mm256_mul_ps(vcoef, exp8(_mm256_sub_ps(v, vlse))));
  }
  if (whole < cols) {  // one padded 8-lane step: every column's value depends on that column alone
    alignas(32) float tz[8] = {}, tb[8] = {};
    std::copy(z + whole, z + cols, tz);
    if (bias != nullptr) std::copy(bias + whole, bias + cols, tb);
    const __m256 v = finish8(_mm256_load_ps(tz), bias ? tb : nullptr, 0, vscale);
    _mm256_store_ps(tz, _mm256_mul_ps(vcoef, exp8(_mm256_sub_ps(v, vlse))));
    std::copy(tz, tz + (cols - whole), z + whole);
  }
  if (target_col >= 0 && target_col < cols) z[target_col] -= g_loss;  // coef * p - g_loss, as lce_dlogits
}

FK_TARGET_AVX2 void add_row(float* acc, const float* x, int64_t cols) {
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8)
    _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), _mm256_loadu_ps(x + j)));
  for (; j < cols; ++j) acc[j] += x[j];
}

}  // namespace lce_avx2
}  // namespace fedkernels
#endif
