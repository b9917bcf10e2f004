// Row kernels of the CPU linear_cross_entropy for float accumulation, one version per CPU level
// (common/cpu_isa.h): lce_rows_avx512.cpp (16 lanes), lce_rows_avx2.cpp (the same 16 lanes as two
// 8-lane halves, bit-identical to avx512; both instantiate lce_rows_body_x86.h), and the scalar
// FK_HOST_DEVICE math of sampled.h at the
// generic level (also float64's and the CUDA kernels' math). Each fuses the logits' finishing step
// (scale * z + bias) with the pass that reads them, so a row chunk is read from cache once per pass
// instead of three times, and the vector levels evaluate exp 16 lanes at a time.
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"
#include "sampled/sampled.h"

namespace fedkernels {

// z[0:cols] = scale * z + bias (bias may be null) in place; returns the chunk's (max, sum exp(z - max))
// with lse_of_chunk's semantics (NaN propagates, all -inf gives max -inf and sum 0).
LseState<float> lce_rows_finish_lse(CpuIsa isa, float* z, const float* bias, float scale, int64_t cols);

// z = coef * exp(scale * z + bias - lse) - (j == target_col ? g_loss : 0) in place (target_col -1: none),
// coef = g_loss + g_lse: lce_finish_logits followed by lce_dlogits in one pass.
void lce_rows_finish_dlogits(CpuIsa isa, float* z, const float* bias, float scale, int64_t cols, float lse,
                             float g_loss, float g_lse, int64_t target_col);

// acc[0:cols] += x[0:cols] (the per-row bias gradient, rows added in order).
void lce_rows_add(CpuIsa isa, float* acc, const float* x, int64_t cols);

#if FK_X86_LEVELS
// The vector levels (same contracts as above).
namespace lce_avx512 {
LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols);
void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss, float g_lse,
                    int64_t target_col);
void add_row(float* acc, const float* x, int64_t cols);
}  // namespace lce_avx512
namespace lce_avx2 {
LseState<float> finish_lse(float* z, const float* bias, float scale, int64_t cols);
void finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss, float g_lse,
                    int64_t target_col);
void add_row(float* acc, const float* x, int64_t cols);
}  // namespace lce_avx2
#endif

}  // namespace fedkernels
