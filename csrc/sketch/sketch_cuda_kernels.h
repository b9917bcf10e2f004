// The CUDA kernel of label_hash, launched on raw pointers: the whole interface between sketch_cuda.cu
// (the kernel, which nvcc compiles without any torch header) and sketch_cuda.cpp (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// One block per sample (n_samples >= 1, at most 2^31 - 1): fills every byte of out [R, N, B] from
// the CSR labels (indptr [N + 1], labels) and table [p, R], all contiguous.
void launch_label_hash(uint8_t* out, const int64_t* indptr, const int64_t* labels, const int32_t* table,
                       int64_t n_samples, int64_t r, int64_t b, cudaStream_t stream);

}  // namespace fedkernels
