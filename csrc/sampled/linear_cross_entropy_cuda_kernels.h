// The CUDA kernels of linear_cross_entropy, launched on raw pointers: the whole interface between
// linear_cross_entropy_cuda.cu (the kernels, which nvcc compiles without any torch header) and
// linear_cross_entropy_cuda.cpp (the stable-ABI launchers, which run the logit GEMMs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// Rows per block of the chunk kernels (one warp per row): a launch takes at most INT32_MAX blocks,
// so the launcher refuses n > INT32_MAX * kLceWarpsPerBlock.
constexpr int kLceWarpsPerBlock = 8;

// z [n, cols]: the raw products h . w_j of classes [c0, c0 + cols), turned in place into the logits
// (bias: the chunk's cols entries, or null) and folded into the running (run_max, run_sum) [n];
// target_logit[r] is set where row r's target lies in the chunk. T: float or double.
template <typename T>
void launch_lce_forward_chunk(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index, int64_t n,
                              int64_t c0, int64_t cols, T* run_max, T* run_sum, T* target_logit, cudaStream_t stream);

// One thread per row: lse [n] and the per-sample loss [n] (0 for ignored rows).
template <typename T>
void launch_lce_forward_finish(const T* run_max, const T* run_sum, const T* target_logit, const int64_t* target,
                               int64_t ignore_index, int64_t n, T* loss, T* lse, cudaStream_t stream);

// z [n, cols] as above, turned in place into d(g_loss * loss + g_lse * lse) / d logits of the chunk.
template <typename T>
void launch_lce_backward_chunk(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index, int64_t n,
                               int64_t c0, int64_t cols, const T* lse, const T* g_loss, const T* g_lse,
                               cudaStream_t stream);

}  // namespace fedkernels
