// CPU-only lane kernels of count_sketch (and bucket_merge's backward): kSketchLanes rows are
// sketched together, x transposed to [class, lane] so each (class, table) adds one contiguous run
// of lanes into acc[b * kSketchLanes + lane]. Per bucket and lane the classes still add in
// ascending order from 0, so the bits equal the one-row scatter of sketch.h (and CUDA's gather).
#pragma once

#include <cstdint>

namespace fedkernels {

constexpr int64_t kSketchLanes = 16;  // rows per block: one 64-byte line of float accumulators

// One table's pass over nc classes: acc[tcol[c * r] * kSketchLanes + lane] += sign * xt[c * kSketchLanes + lane]
// with sign from scol[c * r] (nullptr: all +1). The sign flips the sign bit: a + (-x) is a - x exactly.
void sketch_lanes_table(const float* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, float* acc);
void sketch_lanes_table(const double* xt, int64_t nc, const int32_t* tcol, const int8_t* scol, int64_t r, double* acc);

// xt[c * kSketchLanes + lane] = x[lane * p + c] for c in [0, nc) (x already offset to the chunk).
void sketch_lanes_transpose_in(const float* x, int64_t p, int64_t nc, float* xt);

// dst[lane * dst_stride + b] = acc[b * kSketchLanes + lane] / div for b in [0, nb); then acc[b * kSketchLanes + lane] = 0.
void sketch_lanes_transpose_out(float* acc, int64_t nb, float div, float* dst, int64_t dst_stride);

}  // namespace fedkernels
