// CPU-only lane kernels of count_sketch (and bucket_merge's backward): kSketchLanes rows are
// sketched together, x transposed to [class, lane] so each (class, table) adds one contiguous run
// of lanes into acc[b * kSketchLanes + lane]. Per bucket and lane the classes still add in
// ascending order from 0, so the bits equal the one-row scatter of sketch.h (and CUDA's gather).
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"

namespace fedkernels {

constexpr int64_t kSketchLanes = 16;  // rows per block: one 64-byte line of float accumulators

// One table's pass over nc classes: acc[tcol[c * r] * kSketchLanes + lane] += sign * xt[c * kSketchLanes + lane]
// with sign from scol[c * r] (nullptr: all +1). The sign flips the sign bit: a + (-x) is a - x exactly.
// isa: the CPU level to run (cpu_isa(), read once per op call); every level gives the same bits.
void sketch_lanes_table(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        float* acc);
void sketch_lanes_table(CpuIsa isa, const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r,
                        double* acc);

// The same float pass with one 64-byte add per bucket at the avx512 level (same bits; other levels
// run sketch_lanes_table). A/B per call on a Zen-class VM: faster at some bench configurations in
// 250..5000 buckets and equal at the others; slower per RMW for B <= 16 (store-forwarding chains) and
// at B = 16000 (the accumulator leaves L2), hence the range below.
void sketch_lanes_table_wide(CpuIsa isa, const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol,
                             int64_t r, float* acc);

// Whether to call sketch_lanes_table_wide for a table of nb buckets.
constexpr bool sketch_lanes_use_wide(int64_t nb) { return nb > 64 && nb <= 8192; }

// xt[c * kSketchLanes + lane] = x[lane * p + c] for c in [0, nc) (x already offset to the chunk).
void sketch_lanes_transpose_in(const float* x, int64_t p, int64_t nc, float* xt);

// dst[lane * dst_stride + b] = acc[b * kSketchLanes + lane] / div for b in [0, nb); then acc[b * kSketchLanes + lane] =
// 0.
void sketch_lanes_transpose_out(float* acc, int64_t nb, float div, float* dst, int64_t dst_stride);

#if FK_X86_LEVELS
// The vector levels' table pass (count_sketch_lanes_avx2.cpp, count_sketch_lanes_avx512.cpp: each the
// level's instance of count_sketch_lanes_body_x86.h), sketch_lanes_table's contract: floats in adds
// of the level's width (avx512's is the wide pass), doubles four at a time.
namespace sketch_lanes {
namespace avx2 {
void table(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, float* acc);
void table(const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, double* acc);
}  // namespace avx2
namespace avx512 {
void table(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, float* acc);
void table(const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, double* acc);
}  // namespace avx512
}  // namespace sketch_lanes
#endif

}  // namespace fedkernels
