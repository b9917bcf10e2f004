// The one-sample-piece loop of the direct scan (tv1d_direct.h). At small lam almost every piece of
// the solution is a single sample, and on noisy input whether the string then steps down or up is a
// coin flip: as a branch it mispredicts every other sample (~4 ns each, most of Condat's time there).
// This loop computes the direction with selects, so its one branch (does the piece end at the next
// sample?) is taken almost always where such pieces dominate, and predicts.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "prox/tv1d_io.h"

namespace fedkernels {

#if defined(FK_TV_SSE2)
// z[i] in the low lane (as tv_load), u[i] = the low lane (as tv_cast), and mask ? a : b per lane.
FK_INLINE __m128d tv_load_sd(const double* z, int64_t i) { return _mm_load_sd(z + i); }
FK_INLINE __m128d tv_load_sd(const float* z, int64_t i) { return _mm_cvtps_pd(_mm_load_ss(z + i)); }
FK_INLINE void tv_store_sd(double* u, int64_t i, __m128d v) { _mm_store_sd(u + i, v); }
FK_INLINE void tv_store_sd(float* u, int64_t i, __m128d v) { _mm_store_ss(u + i, _mm_cvtpd_ps(v)); }
FK_INLINE __m128d tv_blend(__m128d mask, __m128d a, __m128d b) {
  return _mm_or_pd(_mm_and_pd(mask, a), _mm_andnot_pd(mask, b));
}
#endif

// Pieces of one sample, from x on. On entry the current piece holds sample x alone, and (l, h) are
// its walls' heights at x + 1 relative to the apex x (the scan's lo, hi, with dx = dm = dM = 1,
// nm = l, nM = h). While sample x + 1 ends that piece and x < end: writes u[x] and restarts at x + 1.
// These are the scan's own operations on the same values, so the same bits: with dx = 2 and
// dm = dM = 1 its tests hi * dm < nm * dx and lo * dM > nM * dx are h + z < l + l (down) and
// l + z > h + h (up); the piece's value nm / dm is l (down) or h (up); the restart puts the wall the
// string bends on at z and the other one 2 lam (tl) away. The two tests exclude each other (h >= l).
// Returns the x it stopped at (its piece holds sample x alone, walls (l, h)); sets bad when a value
// written is NaN or inf, or (kCheckZ: the caller has not checked z ahead) a sample consumed is.
template <typename T, bool kCheckZ>
FK_HOST_DEVICE FK_INLINE int64_t tv_one_sample_pieces(const T* z, T* u, int64_t x, int64_t end, double tl, double& l,
                                                      double& h, bool& bad) {
#if defined(FK_TV_SSE2)
  // Selects as and/andnot/or masks: the compiler turns the scalar form's selects back into branches.
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
#else
  for (; x < end; ++x) {
    const double zk = tv_load(z, x + 1);
    const bool down = h + zk<l + l, up = l + zk> h + h;
    if (!(down || up)) break;
    const double v = down ? l : h;
    u[x] = tv_cast<T>(v);
    bad |= (kCheckZ && tv_nonfinite(zk)) || tv_nonfinite(v);
    const double lz = zk - tl, hz = zk + tl;
    l = down ? zk : lz;
    h = down ? hz : zk;
  }
#endif
  return x;
}

}  // namespace fedkernels
