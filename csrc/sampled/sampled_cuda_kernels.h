// The CUDA kernel of the sampler, launched on raw pointers: the whole interface between
// sampled_cuda.cu (the kernel, which nvcc compiles without any torch header) and sampled_cuda.cpp
// (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// One thread per client c < num_clients: out[c, 0..m) = m distinct classes outside the client's
// positives (shifted[uptr[c]..uptr[c + 1]), see complement_to_class), in draw order.
// slots: [num_clients, capacity] int64 scratch, capacity = sampler_capacity(m).
void launch_sample_rows(const int64_t* uptr, const int64_t* shifted, int64_t num_clients, int64_t num_classes,
                        int64_t m, uint64_t seed, bool per_client_seed, int64_t* slots, uint64_t capacity, int64_t* out,
                        cudaStream_t stream);

}  // namespace fedkernels
