// The CUDA kernels of count_sketch, bucket_merge's backward and count_sketch_query, launched on raw
// pointers: the whole interface between count_sketch_cuda.cu (the kernels, which nvcc compiles
// without any torch header) and count_sketch_cuda.cpp (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sketch/sketch.h"

namespace fedkernels {

// One thread per output bucket: out[row, j, b] (at out + row * out_row_stride + j * out_table_stride
// + b) = the sum of x [rows, p] over the classes the inverse table (offsets [R * B + 1], members;
// sketch_inverse.h) lists for bucket (j, b), divided by divisor. rows * r * nb >= 1.
// scalar_t: float, double, c10::Half, c10::BFloat16.
template <typename scalar_t>
void launch_bucket_gather(const scalar_t* x, int64_t rows, int64_t p, int64_t r, int64_t nb, const int64_t* offsets,
                          const int32_t* members, int64_t out_row_stride, int64_t out_table_stride,
                          sketch_acc_t<scalar_t> divisor, scalar_t* out, cudaStream_t stream);

// One thread per (row, class): out [rows, p] = merge_score of sketch [rows, R, B] through table and
// signs [p, R] (all contiguous). rows * p >= 1.
template <typename scalar_t>
void launch_count_sketch_query(const scalar_t* sketch, const int32_t* table, const int8_t* signs, int64_t rows,
                               int64_t p, int64_t r, int64_t nb, int64_t reduce, scalar_t* out, cudaStream_t stream);

}  // namespace fedkernels
