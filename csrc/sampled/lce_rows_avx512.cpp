// avx512 row kernels of the CPU linear_cross_entropy (see lce_rows.h). exp is a Cephes-style
// reduction x = n ln2 + r with a degree-6 polynomial in r and a scalef by 2^n (within 2 ulp of
// std::exp, correct at +-inf, NaN and in the subnormal range); sums run in 16 lanes, then across
// lanes (lce_rows_x86.h). The explicit FMAs are part of that exp, not of the logits: scale * z + bias
// is rounded as a multiply then an add, as in lce_finish_logits. lce_rows_avx2.cpp computes the
// same lanes with the same operations.
#include "sampled/lce_rows.h"
#include "sampled/lce_rows_x86.h"

#include <cmath>

#if FK_X86_LEVELS
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace fedkernels {
namespace lce_avx512 {

namespace {

using namespace lce_x86;

FK_TARGET_AVX512 inline __m512 exp16(__m512 x) {
  // max/min take the second operand when one is NaN, so a NaN x stays NaN.
  x = _mm512_max_ps(_mm512_set1_ps(kExpLo), x);
  x = _mm512_min_ps(_mm512_set1_ps(kExpHi), x);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);  // p * 2^n, rounded once (subnormals and overflow included)
}

FK_TARGET_AVX512 inline __m512 finish16(__m512 z, const float* bias, int64_t j, __mmask16 m, __m512 vscale) {
  const __m512 scaled = _mm512_mul_ps(vscale, z);
  return bias != nullptr ? _mm512_add_ps(scaled, _mm512_maskz_loadu_ps(m, bias + j)) : scaled;
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

}  // namespace

FK_TARGET_AVX512 LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols) {
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    const __m512 v = finish16(_mm512_maskz_loadu_ps(m, z + j), bias, j, m, vscale);
    _mm512_mask_storeu_ps(z + j, m, v);
    vmax = _mm512_mask_max_ps(vmax, m, v, vmax);  // NaN lanes keep the running max, as lse_of_chunk's
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  if (mx == -INFINITY) return lse_of_chunk(z, cols, 0, 1);  // only -inf / NaN: the scalar rules
  const __m512 vm = _mm512_set1_ps(mx);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, z + j), vm));
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return LseState<float>{mx, hsum16(lo, hi)};
}

FK_TARGET_AVX512 void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                                     float g_lse, int64_t target_col) {
  const __m512 vscale = _mm512_set1_ps(scale), vlse = _mm512_set1_ps(lse), vcoef = _mm512_set1_ps(g_loss + g_lse);
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    const __m512 v = finish16(_mm512_maskz_loadu_ps(m, z + j), bias, j, m, vscale);
    _mm512_mask_storeu_ps(z + j, m, _mm512_mul_ps(vcoef, exp16(_mm512_sub_ps(v, vlse))));
  }
  if (target_col >= 0 && target_col < cols) z[target_col] -= g_loss;  // coef * p - g_loss, as lce_dlogits
}

FK_TARGET_AVX512 void add_row(float* acc, const float* x, int64_t cols) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    _mm512_mask_storeu_ps(acc + j, m,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + j), _mm512_maskz_loadu_ps(m, x + j)));
  }
}

}  // namespace lce_avx512
}  // namespace fedkernels
#endif
