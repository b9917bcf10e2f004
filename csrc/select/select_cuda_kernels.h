// The CUDA kernels of the partial-weight-exchange family, launched on raw pointers: the whole
// interface between select_cuda.cu (the kernels, which nvcc compiles without any torch header) and
// select_cuda.cpp (the stable-ABI launchers). `packed` is a plan of select_plan.h already on the device.
// Each launch returns false, launching nothing, when its grid would need more than 2^31 - 1 blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// One block per chunk: partials[c] = chunk c's sum of squared differences (c < total_chunks).
bool launch_norm_partials(const int64_t* packed, int64_t num_tensors, int64_t total_chunks, double* partials,
                          cudaStream_t stream);

// One thread per tensor: out[t] = the norm of tensor t from its chunk partials, added in chunk order.
bool launch_norm_finish(const int64_t* packed, const double* partials, int64_t num_tensors, bool normalize, float* out,
                        cudaStream_t stream);

// One thread per tensor: out[rank] = i for the k best ranked of norms [m].
bool launch_topk_rank(const float* norms, int64_t m, int64_t k, int64_t* out, cudaStream_t stream);

// One block per chunk: the weighted average of each chunk of the masked plan into its dst tensor.
bool launch_masked(const int64_t* packed, const double* member_weight, int64_t num_groups, int64_t num_members,
                   int64_t total_chunks, cudaStream_t stream);

}  // namespace fedkernels
