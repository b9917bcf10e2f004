// CUDA launcher of hash_buckets (the torch side): checks, allocation; the kernel is in hash_ops_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <tuple>

#include "common/stable/alloc.h"
#include "common/hash_checks.h"
#include "common/hash_ops_cuda_kernels.h"
#include "common/stable/cuda.h"

namespace fedkernels {

static std::tuple<Tensor, Tensor> hash_buckets_cuda(const Tensor& ids, const Tensor& params, int64_t num_buckets) {
  check_hash_args(ids, params, num_buckets);
  const CudaDeviceGuard guard(ids);
  const Tensor ids_c = contiguous_or_self(ids);
  const Tensor params_c = contiguous_or_self(params);
  const int64_t n = ids_c.numel(), r = params_c.size(0);
  Tensor buckets = empty_on(ids, {n, r}, ScalarType::Int);
  Tensor signs = empty_on(ids, {n, r}, ScalarType::Char);
  if (n == 0) return {buckets, signs};
  launch_hash_buckets(ids_c.const_data_ptr<int64_t>(),
                      reinterpret_cast<const TableParams*>(params_c.const_data_ptr<int64_t>()), n, r,
                      static_cast<uint64_t>(num_buckets), buckets.mutable_data_ptr<int32_t>(),
                      signs.mutable_data_ptr<int8_t>(), current_cuda_stream(ids));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return {buckets, signs};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("hash_buckets", TORCH_BOX(&hash_buckets_cuda)); }

}  // namespace fedkernels
