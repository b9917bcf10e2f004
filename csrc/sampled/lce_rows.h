// Row kernels of the CPU linear_cross_entropy for float accumulation, vectorized with AVX-512
// (lce_rows_avx512.cpp). Each fuses the logits' finishing step (scale * z + bias) with the pass
// that reads them, so a row chunk is read from cache once per pass instead of three times, and
// evaluates exp 16 lanes at a time. The scalar FK_HOST_DEVICE math of sampled.h stays the
// reference (float64, CPUs without AVX-512, FEDKERNELS_LCE_SCALAR set, and the CUDA kernels).
#pragma once

#include <cstdint>

#include "sampled/sampled.h"

namespace fedkernels {

// True when the AVX-512 row kernels may run: the CPU has AVX-512F and FEDKERNELS_LCE_SCALAR is unset
// (read on every call, so tests can reach both paths in one process).
bool lce_rows_vectorized();

// z[0:cols] = scale * z + bias (bias may be null) in place; returns the chunk's (max, sum exp(z - max))
// with lse_of_chunk's semantics (NaN propagates, all -inf gives max -inf and sum 0).
LseState<float> lce_rows_finish_lse(float* z, const float* bias, float scale, int64_t cols);

// z = coef * exp(scale * z + bias - lse) - (j == target_col ? g_loss : 0) in place (target_col -1: none),
// coef = g_loss + g_lse: lce_finish_logits followed by lce_dlogits in one pass.
void lce_rows_finish_dlogits(float* z, const float* bias, float scale, int64_t cols, float lse, float g_loss,
                             float g_lse, int64_t target_col);

// acc[0:cols] += x[0:cols] (the per-row bias gradient, rows added in order).
void lce_rows_add(float* acc, const float* x, int64_t cols);

}  // namespace fedkernels
