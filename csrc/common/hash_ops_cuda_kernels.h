// The CUDA kernel of hash_buckets, launched on raw pointers: the whole interface between
// hash_ops_cuda.cu (the kernel, which nvcc compiles without any torch header) and hash_ops_cuda.cpp
// (the torch-side launcher).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/hash_family.h"

namespace fedkernels {

// One thread per (id, table): buckets / signs [n, r] of ids [n] under the r tables tp [r].
void launch_hash_buckets(const int64_t* ids, const TableParams* tp, int64_t n, int64_t r, uint64_t num_buckets,
                         int32_t* buckets, int8_t* signs, cudaStream_t stream);

}  // namespace fedkernels
