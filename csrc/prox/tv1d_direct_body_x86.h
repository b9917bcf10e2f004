// The direct scan of the CPU prox_tv1d (tv1d_direct_levels.h), one body for every x86 level it is built
// for: included by tv1d_direct_avx2.cpp with FK_LEVEL defined (common/simd_levels_x86.h). It has no
// vector code of its own: flatten inlines tv1d_direct_row into a function built for the level, and the
// avx2 build of the scalar loop runs faster with VEX encoding. Scalar IEEE operations in the same order
// and no FMA (the build uses -ffp-contract=off), so every level gives the same bits. The avx512 level
// runs the avx2 build; a tv1d_direct_avx512.cpp would add one.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including tv1d_direct_body_x86.h"
#endif

#include "common/simd_levels_x86.h"
#include "prox/prox.h"
#include "prox/tv1d_direct_levels.h"

#if FK_X86_LEVELS

namespace fedkernels {
namespace prox_cpu {
namespace FK_LEVEL {

FK_LEVEL_TARGET __attribute__((flatten)) TvStatus direct_row(const float* z, float* u, int64_t n, double lam,
                                                             bool anchored, TvResume& resume) {
  return tv1d_direct_row(z, u, n, lam, anchored, tv_direct_budget(n), resume);
}

FK_LEVEL_TARGET __attribute__((flatten)) TvStatus direct_row(const double* z, double* u, int64_t n, double lam,
                                                             bool anchored, TvResume& resume) {
  return tv1d_direct_row(z, u, n, lam, anchored, tv_direct_budget(n), resume);
}

}  // namespace FK_LEVEL
}  // namespace prox_cpu
}  // namespace fedkernels
#endif
