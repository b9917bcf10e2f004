// The row kernels of the CPU linear_cross_entropy (see lce_rows.h), one body for every x86 level:
// included by lce_rows_avx2.cpp and lce_rows_avx512.cpp with FK_LEVEL defined
// (common/simd_levels_x86.h). exp is a Cephes-style reduction x = n ln2 + r with a degree-6
// polynomial in r and p * 2^n rounded once (V::f32_scale_pow2; within 2 ulp of std::exp, correct at
// +-inf, NaN and in the subnormal range). Columns go in steps of 16 lanes (one avx512 vector, two
// avx2 ones) and every lane does the same operations at every level: the same exp, the same per-lane
// max and sum, and the same 16-lane sum tree (lce_rows_x86.h), so the levels give the same bits. The
// explicit FMAs are part of that exp, not of the logits: scale * z + bias is rounded as a multiply
// then an add, as in lce_finish_logits. The last partial step is masked; its padding lanes are left
// out of the max and the sum.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including lce_rows_body_x86.h"
#endif

#include <algorithm>
#include <cmath>

#include "common/simd_levels_x86.h"
#include "sampled/lce_rows.h"
#include "sampled/lce_rows_x86.h"

#if FK_X86_LEVELS
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FK_LCE_NS_CAT(level) lce_##level
#define FK_LCE_NS_OF(level) FK_LCE_NS_CAT(level)
#define FK_LCE_NS FK_LCE_NS_OF(FK_LEVEL)  // lce_avx2 / lce_avx512 (lce_rows.h)

namespace fedkernels {
namespace FK_LCE_NS {

namespace {

using namespace lce_x86;
using V = simd::FK_LEVEL;  // what differs between the levels

constexpr int64_t kStep = 16;             // lanes of a step: the 16 partial sums of hsum16
constexpr int64_t kNv = kStep / V::kF32;  // vectors per step
using Step = V::F32[kNv];

FK_LEVEL_TARGET inline V::F32 exp_lanes(V::F32 x) {
  // max/min take the second operand when one is NaN, so a NaN x stays NaN.
  x = V::f32_max(V::f32_set1(kExpLo), x);
  x = V::f32_min(V::f32_set1(kExpHi), x);
  const V::F32 n = V::f32_round_nearest(V::f32_mul(x, V::f32_set1(kLog2e)));
  V::F32 r = V::f32_fnmadd(n, V::f32_set1(kLn2Hi), x);
  r = V::f32_fnmadd(n, V::f32_set1(kLn2Lo), r);
  V::F32 p = V::f32_set1(kP0);
  p = V::f32_fmadd(p, r, V::f32_set1(kP1));
  p = V::f32_fmadd(p, r, V::f32_set1(kP2));
  p = V::f32_fmadd(p, r, V::f32_set1(kP3));
  p = V::f32_fmadd(p, r, V::f32_set1(kP4));
  p = V::f32_fmadd(p, r, V::f32_set1(kP5));
  p = V::f32_fmadd(p, V::f32_mul(r, r), V::f32_add(r, V::f32_set1(1.0f)));
  return V::f32_scale_pow2(p, n);
}

// scale * z + bias for the columns at j, the first n of them (the bias past them reads as 0).
FK_LEVEL_TARGET inline V::F32 finish_lanes(V::F32 z, const float* bias, int64_t j, int64_t n, V::F32 vscale) {
  const V::F32 scaled = V::f32_mul(vscale, z);
  return bias != nullptr ? V::f32_add(scaled, V::f32_load_first_or(bias + j, n, 0.0f)) : scaled;
}

// The 16 lanes of a step in lane order.
FK_LEVEL_TARGET inline void step_lanes(const Step& s, float* lanes) {
#pragma GCC unroll 2
  for (int v = 0; v < kNv; ++v) V::f32_storeu(lanes + v * V::kF32, s[v]);
}

}  // namespace

FK_LEVEL_TARGET LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols) {
  const V::F32 vscale = V::f32_set1(scale);
  Step vmax;
#pragma GCC unroll 2
  for (int v = 0; v < kNv; ++v) vmax[v] = V::f32_set1(-INFINITY);
  for (int64_t j = 0; j < cols; j += kStep) {
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) {
      const int64_t jv = j + v * V::kF32, n = cols - jv;
      const V::F32 x = finish_lanes(V::f32_load_first_or(z + jv, n, 0.0f), bias, jv, n, vscale);
      V::f32_store_first(z + jv, x, n);
      // NaN lanes keep the running max, as lse_of_chunk's
      vmax[v] = V::f32_blend_first(vmax[v], V::f32_max(x, vmax[v]), n);
    }
  }
  alignas(64) float lanes[kStep];
  step_lanes(vmax, lanes);
  float mx = -INFINITY;
  for (const float v : lanes) mx = std::max(mx, v);         // no lane is NaN: any order gives the same max
  if (mx == -INFINITY) return lse_of_chunk(z, cols, 0, 1);  // only -inf / NaN: the scalar rules
  const V::F32 vm = V::f32_set1(mx);
  Step acc;
#pragma GCC unroll 2
  for (int v = 0; v < kNv; ++v) acc[v] = V::f32_zero();
  for (int64_t j = 0; j < cols; j += kStep) {
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) {
      const int64_t jv = j + v * V::kF32, n = cols - jv;
      const V::F32 e = exp_lanes(V::f32_sub(V::f32_load_first_or(z + jv, n, 0.0f), vm));
      acc[v] = V::f32_blend_first(acc[v], V::f32_add(acc[v], e), n);
    }
  }
  step_lanes(acc, lanes);
  return LseState<float>{mx, hsum16(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes + 8))};
}

FK_LEVEL_TARGET void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                                    float g_lse, int64_t target_col) {
  const V::F32 vscale = V::f32_set1(scale), vlse = V::f32_set1(lse), vcoef = V::f32_set1(g_loss + g_lse);
  for (int64_t j = 0; j < cols; j += V::kF32) {  // every column's value depends on that column alone
    const int64_t n = cols - j;
    const V::F32 x = finish_lanes(V::f32_load_first_or(z + j, n, 0.0f), bias, j, n, vscale);
    V::f32_store_first(z + j, V::f32_mul(vcoef, exp_lanes(V::f32_sub(x, vlse))), n);
  }
  if (target_col >= 0 && target_col < cols) z[target_col] -= g_loss;  // coef * p - g_loss, as lce_dlogits
}

FK_LEVEL_TARGET void add_row(float* acc, const float* x, int64_t cols) {
  for (int64_t j = 0; j < cols; j += V::kF32) {
    const int64_t n = cols - j;
    V::f32_store_first(acc + j,
                       V::f32_add(V::f32_load_first_or(acc + j, n, 0.0f), V::f32_load_first_or(x + j, n, 0.0f)), n);
  }
}

}  // namespace FK_LCE_NS
}  // namespace fedkernels
#endif
