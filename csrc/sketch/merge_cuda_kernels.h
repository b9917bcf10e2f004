// The CUDA kernel of bucket_merge, launched on raw pointers: the whole interface between merge_cuda.cu
// (the kernel, which nvcc compiles without any torch header) and merge_cuda.cpp (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// One thread per (row, class): out [N, p] = merge_score of logp [R, N, B] (contiguous) through
// table [p, R]; n_rows * p >= 1. scalar_t: float, double, c10::Half, c10::BFloat16.
template <typename scalar_t>
void launch_bucket_merge(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                         int64_t reduce, scalar_t* out, cudaStream_t stream);

}  // namespace fedkernels
