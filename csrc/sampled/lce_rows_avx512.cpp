// AVX-512 row kernels of the CPU linear_cross_entropy (see lce_rows.h). exp is a Cephes-style
// reduction x = n ln2 + r with a degree-6 polynomial in r and a scalef by 2^n (within 2 ulp of
// std::exp, correct at +-inf, NaN and in the subnormal range); sums run in 16 lanes, then across
// lanes. The explicit FMAs are part of that exp, not of the logits: scale * z + bias is rounded
// as a multiply then an add, as in lce_finish_logits.
#include "sampled/lce_rows.h"

#include <cmath>
#include <cstdlib>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FK_LCE_HAVE_AVX512 1
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#else
#define FK_LCE_HAVE_AVX512 0
#endif

namespace fedkernels {

#if FK_LCE_HAVE_AVX512

namespace {

#define FK_AVX512 __attribute__((target("avx512f")))

FK_AVX512 inline __m512 exp16(__m512 x) {
  // Below -104 exp is 0 in float, above 89 it is inf: clamping there keeps n finite (max/min take
  // the second operand when one is NaN, so a NaN x stays NaN).
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln 2 in two parts: exact n * hi
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);  // p * 2^n, rounded once (subnormals and overflow included)
}

FK_AVX512 inline __m512 finish16(__m512 z, const float* bias, int64_t j, __mmask16 m, __m512 vscale) {
  const __m512 scaled = _mm512_mul_ps(vscale, z);
  return bias != nullptr ? _mm512_add_ps(scaled, _mm512_maskz_loadu_ps(m, bias + j)) : scaled;
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

FK_AVX512 LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols) {
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
  return LseState<float>{mx, _mm512_reduce_add_ps(acc)};
}

FK_AVX512 void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                              float g_lse, int64_t target_col) {
  const __m512 vscale = _mm512_set1_ps(scale), vlse = _mm512_set1_ps(lse), vcoef = _mm512_set1_ps(g_loss + g_lse);
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    const __m512 v = finish16(_mm512_maskz_loadu_ps(m, z + j), bias, j, m, vscale);
    _mm512_mask_storeu_ps(z + j, m, _mm512_mul_ps(vcoef, exp16(_mm512_sub_ps(v, vlse))));
  }
  if (target_col >= 0 && target_col < cols) z[target_col] -= g_loss;  // coef * p - g_loss, as lce_dlogits
}

FK_AVX512 void add_row(float* acc, const float* x, int64_t cols) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = tail_mask(cols - j);
    _mm512_mask_storeu_ps(acc + j, m,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + j), _mm512_maskz_loadu_ps(m, x + j)));
  }
}

}  // namespace

bool lce_rows_vectorized() {
  static const bool cpu_ok = __builtin_cpu_supports("avx512f");
  return cpu_ok && std::getenv("FEDKERNELS_LCE_SCALAR") == nullptr;
}

LseState<float> lce_rows_finish_lse(float* z, const float* bias, float scale, int64_t cols) {
  return finish_lse(z, bias, scale, cols);
}

void lce_rows_finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                             float g_lse, int64_t target_col) {
  finish_dlogits(z, bias, scale, cols, lse, g_loss, g_lse, target_col);
}

void lce_rows_add(float* acc, const float* x, int64_t cols) { add_row(acc, x, cols); }

#else  // no x86-64 AVX-512 intrinsics: the scalar row math is always used

bool lce_rows_vectorized() { return false; }

LseState<float> lce_rows_finish_lse(float* z, const float* bias, float scale, int64_t cols) {
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  return lse_of_chunk(z, cols, 0, 1);
}

void lce_rows_finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                             float g_lse, int64_t target_col) {
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  lce_dlogits(z, cols, lse, g_loss, g_lse, target_col, 0, 1);
}

void lce_rows_add(float* acc, const float* x, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) acc[j] += x[j];
}

#endif

}  // namespace fedkernels
