// The count-sketch lane kernels (see count_sketch_lanes.h): the dispatch of the table pass on the
// CPU level, the generic level's pass (add_lanes over GCC vector types: SSE2 or NEON, whatever the
// optimiser decides), and the transposes. The x86 levels' passes are count_sketch_lanes_body_x86.h's
// instances; the passes only add and flip sign bits, so every level gives the same bits.
#include "sketch/count_sketch_lanes.h"

#include "sketch/count_sketch_lanes_add.h"
#include "sketch/count_sketch_lanes_x86.h"

namespace fedkernels {

namespace {

// flatten puts add_lanes (and its vector type) into each.
__attribute__((flatten)) void lanes_generic(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                                            int64_t r, float* acc) {
  sketch_lanes::add_lanes<sketch_lanes::f32x8, sketch_lanes::i32x8>(xt, nc, tcol, scol, r, acc, sketch_lanes::kSignF32);
}
__attribute__((flatten)) void lanes_generic(const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                                            int64_t r, double* acc) {
  sketch_lanes::add_lanes<sketch_lanes::f64x4, sketch_lanes::i64x4>(xt, nc, tcol, scol, r, acc, sketch_lanes::kSignF64);
}

}  // namespace

// The avx512 level runs avx2's float pass here: its 64-byte adds win only in sketch_lanes_use_wide's range.
void sketch_lanes_table(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        float* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return sketch_lanes::avx2::table(xt, nc, tcol, scol, r, acc);
#endif
  lanes_generic(xt, nc, tcol, scol, r, acc);
}

void sketch_lanes_table_wide(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                             int64_t r, float* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx512) return sketch_lanes::avx512::table(xt, nc, tcol, scol, r, acc);
#endif
  sketch_lanes_table(isa, xt, nc, tcol, scol, r, acc);
}

void sketch_lanes_table(CpuIsa isa, const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        double* acc) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx512) return sketch_lanes::avx512::table(xt, nc, tcol, scol, r, acc);
  if (isa >= CpuIsa::avx2) return sketch_lanes::avx2::table(xt, nc, tcol, scol, r, acc);
#endif
  lanes_generic(xt, nc, tcol, scol, r, acc);
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
