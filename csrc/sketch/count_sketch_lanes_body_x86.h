// The table pass of the CPU count sketch (count_sketch_lanes.h), one body for every x86 level:
// included by count_sketch_lanes_avx2.cpp and count_sketch_lanes_avx512.cpp with FK_LEVEL defined
// (common/simd_levels_x86.h). add_lanes (count_sketch_lanes_add.h) over GCC vector types of the
// level's float width (V::kF32 lanes: one 256-bit add at avx2, one 64-byte add at avx512) and of four
// doubles at every level; flatten puts add_lanes into each. Adds and sign flips only: every level
// gives the same bits.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including count_sketch_lanes_body_x86.h"
#endif

#include "common/simd_levels_x86.h"
#include "sketch/count_sketch_lanes.h"
#include "sketch/count_sketch_lanes_add.h"

#if FK_X86_LEVELS

namespace fedkernels {
namespace sketch_lanes {
namespace FK_LEVEL {

namespace {

using V = simd::FK_LEVEL;  // what differs between the levels: the float width

typedef float F32 __attribute__((vector_size(V::kF32 * sizeof(float))));
typedef int32_t I32 __attribute__((vector_size(V::kF32 * sizeof(int32_t))));

}  // namespace

FK_LEVEL_TARGET __attribute__((flatten)) void table(const float* xt, int64_t nc, const int32_t* tcol,
                                                    const int8_t* scol, int64_t r, float* acc) {
  add_lanes<F32, I32>(xt, nc, tcol, scol, r, acc, kSignF32);
}

FK_LEVEL_TARGET __attribute__((flatten)) void table(const double* xt, int64_t nc, const int32_t* tcol,
                                                    const int8_t* scol, int64_t r, double* acc) {
  add_lanes<f64x4, i64x4>(xt, nc, tcol, scol, r, acc, kSignF64);
}

}  // namespace FK_LEVEL
}  // namespace sketch_lanes
}  // namespace fedkernels
#endif
