// The x86-64 forms of the direct scan's loads, stores and one-sample-piece loop (tv1d_io.h,
// tv1d_short_pieces.h), in SSE2: the x86-64 baseline, so every x86-64 build has them and no runtime
// dispatch is needed. Scalar IEEE operations on the low lane: the same bits as the portable forms.
// Included only by tv1d_io.h on x86-64 host code (where it defines FK_TV_SSE2).
#pragma once

#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <emmintrin.h>

#include <cstdint>

#include "common/macros.h"

#define FK_TV_SSE2 1

namespace fedkernels {

// float -> double packed from a zeroed register: the scalar cvtss2sd merges into its destination, a
// false dependency that chains loop iterations (float rows ran slower at large lam).
FK_INLINE double tv_load_sse2(const float* z, int64_t i) { return _mm_cvtsd_f64(_mm_cvtps_pd(_mm_load_ss(z + i))); }

// double -> float packed (cvtpd2ps writes the whole register), for the same reason.
FK_INLINE float tv_to_float_sse2(double v) { return _mm_cvtss_f32(_mm_cvtpd_ps(_mm_set_sd(v))); }

// z[i] in the low lane (as tv_load), u[i] = the low lane (as tv_cast), and mask ? a : b per lane.
FK_INLINE __m128d tv_load_sd(const double* z, int64_t i) { return _mm_load_sd(z + i); }
FK_INLINE __m128d tv_load_sd(const float* z, int64_t i) { return _mm_cvtps_pd(_mm_load_ss(z + i)); }
FK_INLINE void tv_store_sd(double* u, int64_t i, __m128d v) { _mm_store_sd(u + i, v); }
FK_INLINE void tv_store_sd(float* u, int64_t i, __m128d v) { _mm_store_ss(u + i, _mm_cvtpd_ps(v)); }
FK_INLINE __m128d tv_blend(__m128d mask, __m128d a, __m128d b) {
  return _mm_or_pd(_mm_and_pd(mask, a), _mm_andnot_pd(mask, b));
}

// tv_one_sample_pieces (tv1d_short_pieces.h) with its selects as and/andnot/or masks: the compiler
// turns the scalar form's selects back into branches, which mispredict on noisy rows.
template <typename T, bool kCheckZ>
FK_INLINE int64_t tv_one_sample_pieces_sse2(const T* z, T* u, int64_t x, int64_t end, double tl, double& l, double& h,
                                            bool& bad) {
  __m128d L = _mm_set_sd(l), H = _mm_set_sd(h);
  const __m128d TL = _mm_set_sd(tl);
  const __m128i kExp = _mm_set1_epi64x(0x7ff0000000000000);  // all-ones exponent: NaN or inf
  __m128i nonfinite = _mm_setzero_si128();
  for (; x < end; ++x) {
    const __m128d Z = tv_load_sd(z, x + 1);
    const __m128d down = _mm_cmplt_sd(_mm_add_sd(H, Z), _mm_add_sd(L, L));
    const __m128d up = _mm_cmpgt_sd(_mm_add_sd(L, Z), _mm_add_sd(H, H));
    if (!(_mm_movemask_pd(_mm_or_pd(down, up)) & 1)) break;
    const __m128d V = tv_blend(down, L, H);
    tv_store_sd(u, x, V);
    // v (and z) as bits; a 32-bit compare suffices: the low halves are 0 on both sides
    const __m128d t = kCheckZ ? _mm_unpacklo_pd(Z, V) : V;
    const __m128i e = _mm_and_si128(_mm_castpd_si128(t), kExp);
    nonfinite = _mm_or_si128(nonfinite, _mm_cmpeq_epi32(e, kExp));
    L = tv_blend(down, Z, _mm_sub_sd(Z, TL));
    H = tv_blend(down, _mm_add_sd(Z, TL), Z);
  }
  l = _mm_cvtsd_f64(L);
  h = _mm_cvtsd_f64(H);
  bad |= (_mm_movemask_pd(_mm_castsi128_pd(nonfinite)) & (kCheckZ ? 3 : 1)) != 0;  // high halves' signs
  return x;
}

}  // namespace fedkernels

#endif
