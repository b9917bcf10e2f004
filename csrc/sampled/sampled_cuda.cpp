// CUDA launchers of the sampler (the torch side): checks, the complement index, allocation and the
// final sort; the kernel (one thread per client) is in sampled_cuda.cu. Compiled by the host
// compiler, only in CUDA builds (and the emulator's).
#include "common/stable/cuda.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_cuda_kernels.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

static Tensor sample_rows_cuda(const Tensor& indptr, const Tensor& indices, int64_t num_classes, int64_t m,
                               uint64_t seed, bool per_client_seed) {
  const CudaDeviceGuard guard(indices);
  const auto index = build_complement_index(indptr, indices, num_classes, m);
  const int64_t c = indptr.numel() - 1;
  Tensor out = empty_on(indices, {c, m});
  if (c == 0 || m == 0) return out;
  const uint64_t capacity = sampler_capacity(m);
  Tensor slots = empty_on(indices, {c, static_cast<int64_t>(capacity)});
  launch_sample_rows(index.uptr.const_data_ptr<int64_t>(), index.shifted.const_data_ptr<int64_t>(), c, num_classes, m,
                     seed, per_client_seed, slots.mutable_data_ptr<int64_t>(), capacity,
                     out.mutable_data_ptr<int64_t>(), current_cuda_stream(indices));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return aten::sort(out, 1).first;  // distinct values: the sorted row is unique
}

static Tensor sample_negatives_cuda(const Tensor& positives, int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_args(positives, num_classes, m);
  const Tensor indptr = long_tensor({0, positives.numel()}, positives);
  return torch::stable::reshape(
      sample_rows_cuda(indptr, contiguous_or_self(positives), num_classes, m, static_cast<uint64_t>(seed), false), {m});
}

static Tensor sample_negatives_batched_cuda(const Tensor& indptr, const Tensor& indices, int64_t num_classes, int64_t m,
                                            int64_t seed) {
  check_sample_negatives_batched_args(indptr, indices, num_classes, m);
  return sample_rows_cuda(contiguous_or_self(indptr), contiguous_or_self(indices), num_classes, m,
                          static_cast<uint64_t>(seed), true);
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("sample_negatives", TORCH_BOX(&sample_negatives_cuda));
  m.impl("sample_negatives_batched", TORCH_BOX(&sample_negatives_batched_cuda));
}

}  // namespace fedkernels
