// Host-only: float16 -> float32 of a chunk for delta_norms (select_cpu.cpp), per CPU level.
#pragma once

#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "common/cpu_isa.h"
#include "select/select.h"

namespace fedkernels {

#if FK_X86_LEVELS
void widen_half_avx2(const c10::Half* src, float* dst, int64_t n);  // widen_half_avx2.cpp
#endif

// Whether this level converts in vectors into a buffer first (the generic level's item math widens
// in place with select.h's branchless conversion, which the compiler vectorises).
inline bool widen_half_vectorized(CpuIsa isa) { return FK_X86_LEVELS && isa >= CpuIsa::avx2; }

inline void widen_half(CpuIsa isa, const c10::Half* src, float* dst, int64_t n) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return widen_half_avx2(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = widen(src[i]);
}

}  // namespace fedkernels
