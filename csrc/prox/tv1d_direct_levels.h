// Host-only: the direct scan of the CPU prox_tv1d (tv1d_direct.h's tv1d_direct_row with the budget of
// tv_direct_budget) built per CPU level (common/cpu_isa.h); prox_cpu.cpp dispatches on cpu_isa().
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"
#include "prox/prox.h"

namespace fedkernels {
namespace prox_cpu {

#if FK_X86_LEVELS
// The avx2 level's build (tv1d_direct_avx2.cpp: tv1d_direct_body_x86.h); the avx512 level runs it too.
namespace avx2 {
TvStatus direct_row(const float* z, float* u, int64_t n, double lam, bool anchored, TvResume& resume);
TvStatus direct_row(const double* z, double* u, int64_t n, double lam, bool anchored, TvResume& resume);
}  // namespace avx2
#endif

}  // namespace prox_cpu
}  // namespace fedkernels
