// Pieces of the row kernels of linear_cross_entropy (lce_rows_body_x86.h) that fix their bits at
// every level: the exp's constants and the order in which the 16 lane sums are added. Included only
// by that body (x86-64).
#pragma once

#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#include <immintrin.h>

namespace fedkernels {
namespace lce_x86 {

// exp(x) = 2^n exp(r), x = n ln2 + r (Cephes-style): n = round(x log2 e), r from ln 2 in two parts
// (n * kLn2Hi is exact), a degree-6 polynomial in r, then p * 2^n rounded once.
constexpr float kExpLo = -104.0f;  // exp is 0 in float below, inf above kExpHi: clamping keeps n finite
constexpr float kExpHi = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// The sum of 16 lanes, lo = lanes 0-7, hi = lanes 8-15, in a fixed tree: (hi + lo), then its
// 128-bit halves, then lanes (0 + 2) + (1 + 3). (GCC's _mm512_reduce_add_ps adds in this order.)
FK_TARGET_AVX2 inline float hsum16(__m256 lo, __m256 hi) {
  const __m256 v = _mm256_add_ps(hi, lo);
  const __m128 q = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  const __m128 s = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(s) + _mm_cvtss_f32(_mm_shuffle_ps(s, s, _MM_SHUFFLE(1, 1, 1, 1)));
}

}  // namespace lce_x86
}  // namespace fedkernels
#endif
