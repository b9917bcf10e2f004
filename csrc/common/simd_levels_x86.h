// Host-only: the x86 CPU levels as traits, so a hand-vectorised kernel is one body instantiated per
// level (the pattern of ATen's per-capability compilation, with target attributes instead of per-file
// flags). A level's thin translation unit, e.g. csrc/spread/knn_exact_avx512.cpp, does
//
//   #define FK_LEVEL avx512                  // the level: its namespace, traits and target
//   #include "spread/knn_exact_body_x86.h"   // functions in namespace FK_LEVEL, each FK_LEVEL_TARGET,
//                                            // written against `using V = simd::FK_LEVEL;`
//
// A traits struct holds only what differs between levels (vector width, masked loads and stores);
// operations both levels do with the same instructions stay plain intrinsics in the body. Each
// operation does the same IEEE arithmetic per lane at every level, so the levels keep the same bits.
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#include <immintrin.h>

// FK_LEVEL_TARGET: the target attribute of the level FK_LEVEL names (FK_TARGET_AVX2 / _AVX512).
#define FK_LEVEL_TARGET_avx2 FK_TARGET_AVX2
#define FK_LEVEL_TARGET_avx512 FK_TARGET_AVX512
#define FK_LEVEL_TARGET_OF(level) FK_LEVEL_TARGET_##level
#define FK_LEVEL_TARGET_EXPAND(level) FK_LEVEL_TARGET_OF(level)
#define FK_LEVEL_TARGET FK_LEVEL_TARGET_EXPAND(FK_LEVEL)

// A traits operation: built for its level and always inlined into the level's body (a body at a
// higher level may call a lower level's operation: its features are a subset).
#define FK_SIMD_AVX2 FK_TARGET_AVX2 __attribute__((always_inline)) inline
#define FK_SIMD_AVX512 FK_TARGET_AVX512 __attribute__((always_inline)) inline

namespace fedkernels {
namespace simd {

// AVX2 + FMA + F16C: 256-bit vectors; masked loads and stores take a vector of lane masks.
struct avx2 {
  static constexpr const char* name = "avx2";

  // The widest float64 vector: kF64 lanes.
  using F64 = __m256d;
  static constexpr int64_t kF64 = 4;

  // The first n (0 < n < 8) floats at p into lanes [0, n), zeros above; nothing at p + n or past it is read.
  FK_SIMD_AVX2 static __m256 load_first_f32x8(const float* p, int64_t n) {
    const __m256i m =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, m);
  }

  // The first n (0 < n < 4) doubles at p, zeros above, as load_first_f32x8.
  FK_SIMD_AVX2 static __m256d load_first_f64x4(const double* p, int64_t n) {
    return _mm256_maskload_pd(p, _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)));
  }

  // kF64 floats at p (the first n of them, 0 < n < kF64, zeros above) widened to float64.
  FK_SIMD_AVX2 static F64 f64_from_f32(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
  FK_SIMD_AVX2 static F64 f64_from_f32_first(const float* p, int64_t n) {
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n)), _mm_setr_epi32(0, 1, 2, 3));
    return _mm256_cvtps_pd(_mm_maskload_ps(p, m));
  }

  // v's lanes to p (the first n of them, 0 < n < kF64; nothing past p + n is written).
  FK_SIMD_AVX2 static void f64_store(double* p, F64 v) { _mm256_storeu_pd(p, v); }
  FK_SIMD_AVX2 static void f64_store_first(double* p, F64 v, int64_t n) {
    _mm256_maskstore_pd(p, _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)), v);
  }

  FK_SIMD_AVX2 static F64 f64_set1(double x) { return _mm256_set1_pd(x); }
  FK_SIMD_AVX2 static F64 f64_div(F64 a, F64 b) { return _mm256_div_pd(a, b); }

  // The widest float32 vector: kF32 lanes. Lane masks are returned as bits (lane l: bit l).
  using F32 = __m256;
  static constexpr int64_t kF32 = 8;

  // Lanes [0, n) as a vector of all-ones lanes (0 <= n; n >= kF32: all).
  FK_SIMD_AVX2 static __m256 f32_first_lanes(int64_t n) {
    const __m256i live = _mm256_set1_epi32(static_cast<int>(n < kF32 ? n : kF32));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(live, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  }
  FK_SIMD_AVX2 static F32 f32_zero() { return _mm256_setzero_ps(); }
  FK_SIMD_AVX2 static F32 f32_set1(float x) { return _mm256_set1_ps(x); }
  FK_SIMD_AVX2 static F32 f32_load(const float* p) { return _mm256_load_ps(p); }  // aligned
  FK_SIMD_AVX2 static F32 f32_loadu(const float* p) { return _mm256_loadu_ps(p); }
  FK_SIMD_AVX2 static void f32_store(float* p, F32 v) { _mm256_store_ps(p, v); }  // aligned
  FK_SIMD_AVX2 static void f32_storeu(float* p, F32 v) { _mm256_storeu_ps(p, v); }
  // The first n (0 <= n) floats at p, `fill` in lanes [n, kF32); nothing at p + n or past it is read.
  FK_SIMD_AVX2 static F32 f32_load_first_or(const float* p, int64_t n, float fill) {
    if (n >= kF32) return _mm256_loadu_ps(p);
    const __m256 m = f32_first_lanes(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, _mm256_castps_si256(m)), m);
  }
  // v in lanes [0, n), `fill` above.
  FK_SIMD_AVX2 static F32 f32_first_or(F32 v, int64_t n, float fill) {
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, f32_first_lanes(n));
  }
  FK_SIMD_AVX2 static F32 f32_add(F32 a, F32 b) { return _mm256_add_ps(a, b); }
  FK_SIMD_AVX2 static F32 f32_sub(F32 a, F32 b) { return _mm256_sub_ps(a, b); }
  FK_SIMD_AVX2 static F32 f32_mul(F32 a, F32 b) { return _mm256_mul_ps(a, b); }
  FK_SIMD_AVX2 static F32 f32_fmadd(F32 a, F32 b, F32 c) { return _mm256_fmadd_ps(a, b, c); }  // one rounding
  FK_SIMD_AVX2 static F32 f32_min(F32 a, F32 b) { return _mm256_min_ps(a, b); }
  FK_SIMD_AVX2 static F32 f32_max(F32 a, F32 b) { return _mm256_max_ps(a, b); }  // b where either is NaN
  FK_SIMD_AVX2 static F32 f32_fnmadd(F32 a, F32 b, F32 c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
  FK_SIMD_AVX2 static F32 f32_round_nearest(F32 a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n (n integral, in [-150, 128]) rounded once, as AVX-512's scalef: 2^n = 2^n1 * 2^n2 with
  // n1 = floor(n / 2) and n2 = n - n1 both normal; for p in [0.5, 2) p * 2^n1 is exact and the second
  // multiply rounds (into the subnormals, or to inf). A NaN p stays NaN, whatever n converts to.
  FK_SIMD_AVX2 static F32 f32_scale_pow2(F32 p, F32 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
  // Lanes [0, n) of v to p; nothing at p + n or past it is written.
  FK_SIMD_AVX2 static void f32_store_first(float* p, F32 v, int64_t n) {
    if (n >= kF32)
      _mm256_storeu_ps(p, v);
    else
      _mm256_maskstore_ps(p, _mm256_castps_si256(f32_first_lanes(n)), v);
  }
  // `fresh` in lanes [0, n), `old` above.
  FK_SIMD_AVX2 static F32 f32_blend_first(F32 old, F32 fresh, int64_t n) {
    return n >= kF32 ? fresh : _mm256_blendv_ps(old, fresh, f32_first_lanes(n));
  }
  // The smallest lane (for lanes that are not NaN, in any order: min does not round).
  FK_SIMD_AVX2 static float f32_reduce_min(F32 v) {
    __m128 h = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_min_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_min_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtss_f32(h);
  }
  // Bits of the lanes where a <= b, a == b (false where either is NaN), |a| < inf.
  FK_SIMD_AVX2 static uint32_t f32_le_bits(F32 a, F32 b) {
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ)));
  }
  FK_SIMD_AVX2 static uint32_t f32_nlt_bits(F32 a, F32 b) {  // not (a < b): true where either is NaN
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NLT_UQ)));
  }
  FK_SIMD_AVX2 static uint32_t f32_eq_bits(F32 a, F32 b) {
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)));
  }
  FK_SIMD_AVX2 static uint32_t f32_finite_bits(F32 a) {
    const __m256 abs = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(abs, _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ)));
  }
};

// The avx2 level plus AVX-512 F and VL: 512-bit vectors, and bit masks for every masked access
// (VL gives them to 256-bit vectors too). What is not redefined here is avx2's.
struct avx512 : avx2 {
  static constexpr const char* name = "avx512";

  using F64 = __m512d;
  static constexpr int64_t kF64 = 8;

  // The first n lanes as a bit mask (0 <= n < 32).
  FK_SIMD_AVX512 static uint32_t first_bits(int64_t n) { return (1u << n) - 1; }

  FK_SIMD_AVX512 static __m256 load_first_f32x8(const float* p, int64_t n) {
    return _mm256_maskz_loadu_ps(static_cast<__mmask8>(first_bits(n)), p);
  }
  FK_SIMD_AVX512 static __m256d load_first_f64x4(const double* p, int64_t n) {
    return _mm256_maskz_loadu_pd(static_cast<__mmask8>(first_bits(n)), p);
  }

  FK_SIMD_AVX512 static F64 f64_from_f32(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
  FK_SIMD_AVX512 static F64 f64_from_f32_first(const float* p, int64_t n) {
    return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(static_cast<__mmask8>(first_bits(n)), p));
  }
  FK_SIMD_AVX512 static void f64_store(double* p, F64 v) { _mm512_storeu_pd(p, v); }
  FK_SIMD_AVX512 static void f64_store_first(double* p, F64 v, int64_t n) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(first_bits(n)), v);
  }
  FK_SIMD_AVX512 static F64 f64_set1(double x) { return _mm512_set1_pd(x); }
  FK_SIMD_AVX512 static F64 f64_div(F64 a, F64 b) { return _mm512_div_pd(a, b); }

  using F32 = __m512;
  static constexpr int64_t kF32 = 16;

  FK_SIMD_AVX512 static __mmask16 f32_first_mask(int64_t n) {
    return static_cast<__mmask16>(n >= kF32 ? 0xFFFF : n > 0 ? first_bits(n) : 0);
  }
  FK_SIMD_AVX512 static F32 f32_zero() { return _mm512_setzero_ps(); }
  FK_SIMD_AVX512 static F32 f32_set1(float x) { return _mm512_set1_ps(x); }
  FK_SIMD_AVX512 static F32 f32_load(const float* p) { return _mm512_load_ps(p); }
  FK_SIMD_AVX512 static F32 f32_loadu(const float* p) { return _mm512_loadu_ps(p); }
  FK_SIMD_AVX512 static void f32_store(float* p, F32 v) { _mm512_store_ps(p, v); }
  FK_SIMD_AVX512 static void f32_storeu(float* p, F32 v) { _mm512_storeu_ps(p, v); }
  FK_SIMD_AVX512 static F32 f32_load_first_or(const float* p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), f32_first_mask(n), p);
  }
  FK_SIMD_AVX512 static F32 f32_first_or(F32 v, int64_t n, float fill) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), f32_first_mask(n), v);
  }
  FK_SIMD_AVX512 static F32 f32_add(F32 a, F32 b) { return _mm512_add_ps(a, b); }
  FK_SIMD_AVX512 static F32 f32_sub(F32 a, F32 b) { return _mm512_sub_ps(a, b); }
  FK_SIMD_AVX512 static F32 f32_mul(F32 a, F32 b) { return _mm512_mul_ps(a, b); }
  FK_SIMD_AVX512 static F32 f32_fmadd(F32 a, F32 b, F32 c) { return _mm512_fmadd_ps(a, b, c); }
  FK_SIMD_AVX512 static F32 f32_min(F32 a, F32 b) { return _mm512_min_ps(a, b); }
  FK_SIMD_AVX512 static F32 f32_max(F32 a, F32 b) { return _mm512_max_ps(a, b); }
  FK_SIMD_AVX512 static F32 f32_fnmadd(F32 a, F32 b, F32 c) { return _mm512_fnmadd_ps(a, b, c); }
  FK_SIMD_AVX512 static F32 f32_round_nearest(F32 a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  FK_SIMD_AVX512 static F32 f32_scale_pow2(F32 p, F32 n) { return _mm512_scalef_ps(p, n); }
  FK_SIMD_AVX512 static void f32_store_first(float* p, F32 v, int64_t n) {
    _mm512_mask_storeu_ps(p, f32_first_mask(n), v);
  }
  FK_SIMD_AVX512 static F32 f32_blend_first(F32 old, F32 fresh, int64_t n) {
    return _mm512_mask_mov_ps(old, f32_first_mask(n), fresh);
  }
  FK_SIMD_AVX512 static float f32_reduce_min(F32 v) { return _mm512_reduce_min_ps(v); }
  FK_SIMD_AVX512 static uint32_t f32_le_bits(F32 a, F32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  FK_SIMD_AVX512 static uint32_t f32_nlt_bits(F32 a, F32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLT_UQ); }
  FK_SIMD_AVX512 static uint32_t f32_eq_bits(F32 a, F32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  FK_SIMD_AVX512 static uint32_t f32_finite_bits(F32 a) {
    return _mm512_cmp_ps_mask(_mm512_abs_ps(a), _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  }
};

}  // namespace simd
}  // namespace fedkernels
#endif
