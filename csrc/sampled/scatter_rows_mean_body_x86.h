// The row loop of the CPU scatter_rows_mean (scatter_rows_cpu.h), one body for every x86 level it is
// built for: included by scatter_rows_mean_avx2.cpp with FK_LEVEL defined (common/simd_levels_x86.h).
// It has no vector code of its own: flatten inlines mean_rows_dtype into a function built for the
// level, whose target lets the compiler vectorise the per-row math (the avx2 build adds 8 floats per
// instruction). Only adds, multiplies and divides, lane by lane in the same order, so every level
// gives the same bits. The avx512 level runs the avx2 build (these memory-bound rows never had an
// AVX-512 one); a scatter_rows_mean_avx512.cpp would add it.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including scatter_rows_mean_body_x86.h"
#endif

#include "common/simd_levels_x86.h"
#include "sampled/scatter_rows_cpu.h"

#if FK_X86_LEVELS

namespace fedkernels {
namespace scatter_cpu {
namespace FK_LEVEL {

FK_LEVEL_TARGET __attribute__((flatten)) void run_rows(const ScatterJob<float, float>& j, int64_t u0, int64_t u1,
                                                       float* acc, bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}

FK_LEVEL_TARGET __attribute__((flatten)) void run_rows(const ScatterJob<double, double>& j, int64_t u0, int64_t u1,
                                                       double* acc, bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}

}  // namespace FK_LEVEL
}  // namespace scatter_cpu
}  // namespace fedkernels
#endif
