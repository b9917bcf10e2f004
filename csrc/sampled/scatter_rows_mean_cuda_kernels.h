// The CUDA kernels of scatter_rows_mean, launched on raw pointers: the whole interface between
// scatter_rows_mean_cuda.cu (the kernels, which nvcc compiles without any torch header) and
// scatter_rows_mean_cuda.cpp (the stable-ABI launcher, which sorts the rows into segments).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// One thread per output row u < num_rows: the scale of its weights (wscale[u]) and the sum of its
// scaled weights (wsum[u]) over the sources perm[seg[u]..seg[u + 1]). acc_t: float or double.
template <typename acc_t>
void launch_segment_weight_sum(const int64_t* seg, const int64_t* perm, const acc_t* w, int64_t num_rows, acc_t* wsum,
                               acc_t* wscale, cudaStream_t stream);

// out[rows[u]] = the weighted mean of its sources (src [T, d]), one block per row and column slice.
// num_rows <= INT32_MAX (the launcher checks). (scalar_t, acc_t): (float, float), (double, double),
// (c10::Half, float), (c10::BFloat16, float), i.e. at::opmath_type.
template <typename scalar_t, typename acc_t>
void launch_scatter_rows_mean(scalar_t* out, const scalar_t* src, const int64_t* rows, const int64_t* seg,
                              const int64_t* perm, const acc_t* w, const acc_t* wsum, const acc_t* wscale,
                              int64_t num_rows, int64_t d, cudaStream_t stream);

}  // namespace fedkernels
