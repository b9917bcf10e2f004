// The one pass of the CPU count-sketch lane kernels (count_sketch_lanes.h), written once over GCC
// vector types and built per CPU level: count_sketch_lanes.cpp at the generic level (SSE2 or NEON),
// count_sketch_lanes_body_x86.h at the x86 levels. It only adds and flips sign bits, so every width
// and level gives the same bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "sketch/count_sketch_lanes.h"

namespace fedkernels {
namespace sketch_lanes {

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));

constexpr int32_t kSignF32 = static_cast<int32_t>(0x80000000u);
constexpr int64_t kSignF64 = static_cast<int64_t>(0x8000000000000000ull);

// acc[tcol[c * r] * kSketchLanes + lane] += sign * xt[c * kSketchLanes + lane], V (with integer twin
// IV) lanes at a time. Branch-free signs: a random sign per (class, table) would mispredict half the time.
template <typename V, typename IV, typename T, typename I>
inline void add_lanes(const T* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, T* acc, I sign_bit) {
  constexpr int64_t kStep = sizeof(V) / sizeof(T);
  static_assert(kSketchLanes % kStep == 0, "a bucket's lanes are whole vectors");
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

}  // namespace sketch_lanes
}  // namespace fedkernels
