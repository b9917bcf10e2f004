// The hot loops of the CPU count sketch (see count_sketch_lanes.h). GCC vector types keep them
// vectorised whatever the optimiser decides (SSE2 or NEON at the generic level); the avx2 level
// builds them with 256-bit adds and the avx512 level the "wide" float pass with one 64-byte add per
// bucket. The passes only add and flip sign bits, so every level gives the same bits.
#include "sketch/count_sketch_lanes.h"

#include <cstring>

#include "sketch/count_sketch_lanes_x86.h"

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

// One build of each pass per level; flatten puts add_lanes (and its vector type) into each.
#define FK_SKETCH_LANES(ATTR, SUFFIX)                                                                      \
  ATTR __attribute__((flatten)) void lanes_f32_##SUFFIX(const float* xt, int64_t nc, const int32_t* tcol,  \
                                                        const int8_t* scol, int64_t r, float* acc) {       \
    add_lanes<f32x8, i32x8>(xt, nc, tcol, scol, r, acc, static_cast<int32_t>(0x80000000u));                \
  }                                                                                                        \
  ATTR __attribute__((flatten)) void lanes_f64_##SUFFIX(const double* xt, int64_t nc, const int32_t* tcol, \
                                                        const int8_t* scol, int64_t r, double* acc) {      \
    add_lanes<f64x4, i64x4>(xt, nc, tcol, scol, r, acc, static_cast<int64_t>(0x8000000000000000ull));      \
  }
namespace {
FK_SKETCH_LANES(, generic)
#if FK_X86_LEVELS
FK_SKETCH_LANES(FK_TARGET_AVX2, avx2)
FK_TARGET_AVX512 __attribute__((flatten)) void lanes_f32_wide_avx512(const float* xt, int64_t nc, const int32_t* tcol,
                                                                     const int8_t* scol, int64_t r, float* acc) {
  add_lanes<f32x16, i32x16>(xt, nc, tcol, scol, r, acc, static_cast<int32_t>(0x80000000u));
}
#endif
}  // namespace
#undef FK_SKETCH_LANES

void sketch_lanes_table(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        float* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return lanes_f32_avx2(xt, nc, tcol, scol, r, acc);
#endif
  lanes_f32_generic(xt, nc, tcol, scol, r, acc);
}

void sketch_lanes_table_wide(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                             int64_t r, float* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx512) return lanes_f32_wide_avx512(xt, nc, tcol, scol, r, acc);
#endif
  sketch_lanes_table(isa, xt, nc, tcol, scol, r, acc);
}

void sketch_lanes_table(CpuIsa isa, const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        double* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return lanes_f64_avx2(xt, nc, tcol, scol, r, acc);
#endif
  lanes_f64_generic(xt, nc, tcol, scol, r, acc);
}

// Blocks of four classes / buckets in SSE2 on x86-64 (count_sketch_lanes_x86.h), the rest (and every
// column on other targets) one element at a time: the same values either way (IEEE division).
void sketch_lanes_transpose_in(const float* x, int64_t p, int64_t nc, float* xt) {
  int64_t c = 0;
#if defined(FK_SKETCH_SSE2)
  c = sketch_lanes_transpose_in_sse2(x, p, nc, xt);
#endif
  for (; c < nc; ++c) {
    for (int64_t l = 0; l < kSketchLanes; ++l) xt[c * kSketchLanes + l] = x[l * p + c];
  }
}

// Each bucket's line is zeroed right after it is read, while it is in L1, ready for the next block.
void sketch_lanes_transpose_out(float* acc, int64_t nb, float div, float* dst, int64_t dst_stride) {
  int64_t b = 0;
#if defined(FK_SKETCH_SSE2)
  b = sketch_lanes_transpose_out_sse2(acc, nb, div, dst, dst_stride);
#endif
  for (; b < nb; ++b) {
    for (int64_t l = 0; l < kSketchLanes; ++l) {
      dst[l * dst_stride + b] = acc[b * kSketchLanes + l] / div;
      acc[b * kSketchLanes + l] = 0.0f;
    }
  }
}

}  // namespace fedkernels
