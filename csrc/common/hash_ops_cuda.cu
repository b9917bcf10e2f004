// hash_buckets on CUDA: one thread per (id, table), the same hash_family.h arithmetic as the CPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "common/hash_checks.h"
#include "common/hash_family.h"

namespace fedkernels {

__global__ void hash_buckets_kernel(const int64_t* ids, const TableParams* tp, int64_t n, int64_t r,
                                    uint64_t num_buckets, int32_t* buckets, int8_t* signs) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * r) return;
  const int64_t i = k / r, j = k % r;
  buckets[k] = hash_bucket(tp[j], static_cast<uint64_t>(ids[i]), num_buckets);
  signs[k] = hash_sign(tp[j], static_cast<uint64_t>(ids[i]));
}

static std::tuple<at::Tensor, at::Tensor> hash_buckets_cuda(const at::Tensor& ids, const at::Tensor& params,
                                                            int64_t num_buckets) {
  check_hash_args(ids, params, num_buckets);
  const c10::cuda::CUDAGuard guard(ids.device());
  const auto ids_c = ids.contiguous();
  const auto params_c = params.contiguous();
  const int64_t n = ids_c.numel(), r = params_c.size(0);
  auto buckets = at::empty({n, r}, ids.options().dtype(at::kInt));
  auto signs = at::empty({n, r}, ids.options().dtype(at::kChar));
  if (n == 0) return {buckets, signs};
  const int threads = 256;
  const int64_t blocks = (n * r + threads - 1) / threads;
  hash_buckets_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      ids_c.data_ptr<int64_t>(), reinterpret_cast<const TableParams*>(params_c.data_ptr<int64_t>()), n, r,
      static_cast<uint64_t>(num_buckets), buckets.data_ptr<int32_t>(), signs.data_ptr<int8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {buckets, signs};
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("hash_buckets", &hash_buckets_cuda); }

}  // namespace fedkernels
