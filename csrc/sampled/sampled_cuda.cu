// CUDA kernel of the sampler (one thread per client). No torch header: sampled_cuda.cpp prepares the
// positives, allocates and launches.
#include "sampled/sampled.h"
#include "sampled/sampled_cuda_kernels.h"

namespace fedkernels {

__global__ void sample_rows_kernel(const int64_t* uptr, const int64_t* shifted, int64_t num_clients,
                                   int64_t num_classes, int64_t m, uint64_t seed, bool per_client_seed, int64_t* slots,
                                   uint64_t capacity, int64_t* out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= num_clients) return;
  const uint64_t key = per_client_seed ? client_seed(seed, static_cast<uint64_t>(c)) : seed;
  sample_complement(key, num_classes, shifted + uptr[c], uptr[c + 1] - uptr[c], m, slots + c * capacity, out + c * m);
}

void launch_sample_rows(const int64_t* uptr, const int64_t* shifted, int64_t num_clients, int64_t num_classes,
                        int64_t m, uint64_t seed, bool per_client_seed, int64_t* slots, uint64_t capacity, int64_t* out,
                        cudaStream_t stream) {
  const int threads = 128;
  const auto blocks = static_cast<unsigned>((num_clients + threads - 1) / threads);
  sample_rows_kernel<<<blocks, threads, 0, stream>>>(uptr, shifted, num_clients, num_classes, m, seed, per_client_seed,
                                                     slots, capacity, out);
}

}  // namespace fedkernels
