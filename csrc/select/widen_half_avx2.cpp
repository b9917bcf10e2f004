// float16 -> float32 of n values with F16C, eight at a time (the avx2 level; select_cpu.cpp
// dispatches here through cpu_isa()). The conversion is exact, so the values equal the scalar
// c10::Half conversion's (which is slow per value).
#include "select/widen_half.h"

#if FK_X86_LEVELS
#include <immintrin.h>

namespace fedkernels {

FK_TARGET_AVX2 void widen_half_avx2(const c10::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = widen(src[i]);
}

}  // namespace fedkernels
#endif
