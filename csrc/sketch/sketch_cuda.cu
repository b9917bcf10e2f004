// CUDA kernel of label_hash: one block per sample, threads over its buckets/labels. No torch header:
// sketch_cuda.cpp checks, allocates and calls launch_label_hash.
#include "sketch/sketch.h"
#include "sketch/sketch_cuda_kernels.h"

namespace fedkernels {

__global__ void label_hash_kernel(uint8_t* out, const int64_t* indptr, const int64_t* labels, const int32_t* table,
                                  int64_t n_samples, int64_t r, int64_t b) {
  const int64_t n = blockIdx.x;
  label_hash_zero(out, n, n_samples, r, b, threadIdx.x, blockDim.x);
  __syncthreads();
  // Threads that hit the same bucket all store 1: a benign race with one possible value.
  label_hash_set(out, labels + indptr[n], indptr[n + 1] - indptr[n], table, n, n_samples, r, b, threadIdx.x,
                 blockDim.x);
}

void launch_label_hash(uint8_t* out, const int64_t* indptr, const int64_t* labels, const int32_t* table,
                       int64_t n_samples, int64_t r, int64_t b, cudaStream_t stream) {
  label_hash_kernel<<<static_cast<unsigned>(n_samples), 256, 0, stream>>>(out, indptr, labels, table, n_samples, r, b);
}

}  // namespace fedkernels
