// The hot loops of the CPU count sketch (see count_sketch_lanes.h). GCC vector types keep them
// vectorised whatever the optimiser decides; FK_CPU_AVX2_CLONE gives 256-bit adds where available,
// and the "wide" float pass also has an AVX-512 clone (one 64-byte add per bucket). The passes
// only add and flip sign bits, so no clone can contract anything into an FMA.
#include "sketch/count_sketch_lanes.h"

#include <emmintrin.h>
#include <xmmintrin.h>

#include <cstring>

#include "common/macros.h"

namespace fedkernels {

namespace {

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));

static_assert(kSketchLanes % 16 == 0, "the float kernels add 8 or 16 lanes at a time");

// Branch-free signs: a random sign per (class, table) would mispredict half the time.
template <typename V, typename IV, typename T, typename I>
inline void add_lanes(const T* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, T* acc, I sign_bit) {
  constexpr int64_t kStep = sizeof(V) / sizeof(T);
  for (int64_t c = 0; c < nc; ++c) {
    T* a = acc + static_cast<int64_t>(tcol[c * r]) * kSketchLanes;
    const T* xi = xt + c * kSketchLanes;
    const I flip = (scol != nullptr && scol[c * r] < 0) ? sign_bit : I(0);
    for (int64_t l = 0; l < kSketchLanes; l += kStep) {
      V av, xv;
      std::memcpy(&av, a + l, sizeof(V));
      std::memcpy(&xv, xi + l, sizeof(V));
      av += (V)((IV)xv ^ flip);
      std::memcpy(a + l, &av, sizeof(V));
    }
  }
}

}  // namespace

FK_CPU_AVX2_CLONE void sketch_lanes_table(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                                          int64_t r, float* acc) {
  add_lanes<f32x8, i32x8>(xt, nc, tcol, scol, r, acc, static_cast<int32_t>(0x80000000u));
}

FK_CPU_AVX512_CLONE void sketch_lanes_table_wide(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                                                 int64_t r, float* acc) {
  add_lanes<f32x16, i32x16>(xt, nc, tcol, scol, r, acc, static_cast<int32_t>(0x80000000u));
}

FK_CPU_AVX2_CLONE void sketch_lanes_table(const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                                          int64_t r, double* acc) {
  add_lanes<f64x4, i64x4>(xt, nc, tcol, scol, r, acc, static_cast<int64_t>(0x8000000000000000ull));
}

// 4 x 4 SSE2 transposes (baseline x86-64): one load and one store per element, all vector-wide.
void sketch_lanes_transpose_in(const float* x, int64_t p, int64_t nc, float* xt) {
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
  for (; c < nc; ++c) {
    for (int64_t l = 0; l < kSketchLanes; ++l) xt[c * kSketchLanes + l] = x[l * p + c];
  }
}

// _mm_div_ps is IEEE division per lane: the same bits as the scalar a / div. Each bucket's line
// is zeroed right after it is read, while it is in L1, ready for the next block.
void sketch_lanes_transpose_out(float* acc, int64_t nb, float div, float* dst, int64_t dst_stride) {
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
  for (; b < nb; ++b) {
    for (int64_t l = 0; l < kSketchLanes; ++l) {
      dst[l * dst_stride + b] = acc[b * kSketchLanes + l] / div;
      acc[b * kSketchLanes + l] = 0.0f;
    }
  }
}

}  // namespace fedkernels
