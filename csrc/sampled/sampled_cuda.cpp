// CUDA launchers of the sampler (ATen side): checks, the complement index, allocation and the final
// sort; the kernel (one thread per client) is in sampled_cuda.cu. Compiled by the host compiler, only
// in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>

#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_cuda_kernels.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

static at::Tensor sample_rows_cuda(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_classes, int64_t m,
                                   uint64_t seed, bool per_client_seed) {
  const c10::cuda::CUDAGuard guard(indices.device());
  const auto index = build_complement_index(indptr, indices, num_classes, m);
  const int64_t c = indptr.numel() - 1;
  auto out = at::empty({c, m}, indices.options());
  if (c == 0 || m == 0) return out;
  const uint64_t capacity = sampler_capacity(m);
  auto slots = at::empty({c, static_cast<int64_t>(capacity)}, indices.options());
  launch_sample_rows(index.uptr.data_ptr<int64_t>(), index.shifted.data_ptr<int64_t>(), c, num_classes, m, seed,
                     per_client_seed, slots.data_ptr<int64_t>(), capacity, out.data_ptr<int64_t>(),
                     c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return std::get<0>(at::sort(out, 1));  // distinct values: the sorted row is unique
}

static at::Tensor sample_negatives_cuda(const at::Tensor& positives, int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_args(positives, num_classes, m);
  const auto indptr =
      at::tensor({int64_t(0), positives.numel()}, positives.options().device(at::kCPU)).to(positives.device());
  return sample_rows_cuda(indptr, positives.contiguous(), num_classes, m, static_cast<uint64_t>(seed), false)
      .reshape({m});
}

static at::Tensor sample_negatives_batched_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                                int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_batched_args(indptr, indices, num_classes, m);
  return sample_rows_cuda(indptr.contiguous(), indices.contiguous(), num_classes, m, static_cast<uint64_t>(seed), true);
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("sample_negatives", &sample_negatives_cuda);
  m.impl("sample_negatives_batched", &sample_negatives_batched_cuda);
}

}  // namespace fedkernels
