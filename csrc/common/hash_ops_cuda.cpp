// CUDA launcher of hash_buckets (ATen side): checks, allocation; the kernel is in hash_ops_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include <tuple>

#include "common/hash_checks.h"
#include "common/hash_ops_cuda_kernels.h"

namespace fedkernels {

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
  launch_hash_buckets(ids_c.data_ptr<int64_t>(), reinterpret_cast<const TableParams*>(params_c.data_ptr<int64_t>()), n,
                      r, static_cast<uint64_t>(num_buckets), buckets.data_ptr<int32_t>(), signs.data_ptr<int8_t>(),
                      c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {buckets, signs};
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("hash_buckets", &hash_buckets_cuda); }

}  // namespace fedkernels
