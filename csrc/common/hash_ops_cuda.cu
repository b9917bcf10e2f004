// hash_buckets on CUDA: one thread per (id, table), the same hash_family.h arithmetic as the CPU.
// No torch header: hash_ops_cuda.cpp checks, allocates and launches.
#include "common/hash_ops_cuda_kernels.h"

namespace fedkernels {

__global__ void hash_buckets_kernel(const int64_t* ids, const TableParams* tp, int64_t n, int64_t r,
                                    uint64_t num_buckets, int32_t* buckets, int8_t* signs) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * r) return;
  const int64_t i = k / r, j = k % r;
  buckets[k] = hash_bucket(tp[j], static_cast<uint64_t>(ids[i]), num_buckets);
  signs[k] = hash_sign(tp[j], static_cast<uint64_t>(ids[i]));
}

void launch_hash_buckets(const int64_t* ids, const TableParams* tp, int64_t n, int64_t r, uint64_t num_buckets,
                         int32_t* buckets, int8_t* signs, cudaStream_t stream) {
  const int threads = 256;
  const int64_t blocks = (n * r + threads - 1) / threads;
  hash_buckets_kernel<<<blocks, threads, 0, stream>>>(ids, tp, n, r, num_buckets, buckets, signs);
}

}  // namespace fedkernels
