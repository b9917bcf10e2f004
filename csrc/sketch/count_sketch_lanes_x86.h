// The x86-64 transposes of the count-sketch lane kernels (count_sketch_lanes.cpp): 4 x 4 blocks in
// SSE2, the x86-64 baseline (no runtime dispatch needed), one load and one store per element, all
// vector-wide. Exact moves and IEEE division per lane: the same values as the portable loops.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>

#include <cstdint>

#include "sketch/count_sketch_lanes.h"

#define FK_SKETCH_SSE2 1

namespace fedkernels {

// xt[c * kSketchLanes + l] = x[l * p + c] for whole blocks of four classes; returns the classes done.
inline int64_t sketch_lanes_transpose_in_sse2(const float* x, int64_t p, int64_t nc, float* xt) {
  int64_t c = 0;
  for (; c + 4 <= nc; c += 4) {
    for (int64_t l = 0; l < kSketchLanes; l += 4) {
      __m128 r0 = _mm_loadu_ps(x + (l + 0) * p + c), r1 = _mm_loadu_ps(x + (l + 1) * p + c);
      __m128 r2 = _mm_loadu_ps(x + (l + 2) * p + c), r3 = _mm_loadu_ps(x + (l + 3) * p + c);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(xt + (c + 0) * kSketchLanes + l, r0);
      _mm_storeu_ps(xt + (c + 1) * kSketchLanes + l, r1);
      _mm_storeu_ps(xt + (c + 2) * kSketchLanes + l, r2);
      _mm_storeu_ps(xt + (c + 3) * kSketchLanes + l, r3);
    }
  }
  return c;
}

// dst[l * dst_stride + b] = acc[b * kSketchLanes + l] / div, then acc zeroed, for whole blocks of
// four buckets; returns the buckets done.
inline int64_t sketch_lanes_transpose_out_sse2(float* acc, int64_t nb, float div, float* dst, int64_t dst_stride) {
  const __m128 d = _mm_set1_ps(div);
  const __m128 zero = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    for (int64_t l = 0; l < kSketchLanes; l += 4) {
      float* a = acc + b * kSketchLanes + l;
      __m128 r0 = _mm_loadu_ps(a), r1 = _mm_loadu_ps(a + kSketchLanes);
      __m128 r2 = _mm_loadu_ps(a + 2 * kSketchLanes), r3 = _mm_loadu_ps(a + 3 * kSketchLanes);
      _mm_storeu_ps(a, zero);
      _mm_storeu_ps(a + kSketchLanes, zero);
      _mm_storeu_ps(a + 2 * kSketchLanes, zero);
      _mm_storeu_ps(a + 3 * kSketchLanes, zero);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(dst + (l + 0) * dst_stride + b, _mm_div_ps(r0, d));
      _mm_storeu_ps(dst + (l + 1) * dst_stride + b, _mm_div_ps(r1, d));
      _mm_storeu_ps(dst + (l + 2) * dst_stride + b, _mm_div_ps(r2, d));
      _mm_storeu_ps(dst + (l + 3) * dst_stride + b, _mm_div_ps(r3, d));
    }
  }
  return b;
}

}  // namespace fedkernels

#endif
