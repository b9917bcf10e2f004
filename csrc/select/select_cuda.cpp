// CUDA launchers of the partial-weight-exchange family (ATen side): checks, the packed plans of
// select_plan.h and their copy to the device, allocation; the kernels are in select_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <vector>

#include "select/select.h"
#include "select/select_checks.h"
#include "select/select_cuda_kernels.h"
#include "select/select_plan.h"

namespace fedkernels {

// Host vector -> device tensor through pinned memory, asynchronously on the current stream (the
// caching host allocator keeps the pinned block alive until the copy has run).
// (The CUDA emulator has no pinned memory; there the staging tensor is ordinary host memory.)
template <typename T>
static at::Tensor to_device(const std::vector<T>& host, at::ScalarType dtype, const at::Device& device) {
#if defined(FK_CUDA_EMU)
  constexpr bool kPinned = false;
#else
  constexpr bool kPinned = true;
#endif
  auto pinned = at::empty({static_cast<int64_t>(host.size())}, at::TensorOptions().dtype(dtype).pinned_memory(kPinned));
  std::copy(host.begin(), host.end(), static_cast<T*>(pinned.data_ptr()));
  return pinned.to(device, /*non_blocking=*/true);
}

// A launch function's refusal (a grid over 2^31 - 1 blocks) as an error.
static void check_launched(bool launched) { TORCH_CHECK(launched, "select: at most 2^31 - 1 chunks per call on CUDA"); }

static at::Tensor delta_norms_cuda(at::TensorList new_, at::TensorList old, bool normalize) {
  check_tensor_pairs(new_, old);
  // Empty lists carry no device (the dispatcher never routes them here on a GPU; the emulator can):
  // no tensors, no norms, and no new_[0] to read.
  if (new_.empty()) return at::empty({0}, at::TensorOptions().dtype(at::kFloat));
  const at::Device device = new_[0].device();
  const c10::cuda::CUDAGuard guard(device);
  const NormPlan plan = make_norm_plan(new_, old);
  auto out = at::empty({plan.num_tensors}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (plan.num_tensors == 0) return out;
  const auto packed = to_device(plan.packed, at::kLong, device);
  auto partials = at::empty({std::max<int64_t>(plan.total_chunks, 1)}, out.options().dtype(at::kDouble));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (plan.total_chunks > 0) {
    check_launched(launch_norm_partials(packed.data_ptr<int64_t>(), plan.num_tensors, plan.total_chunks,
                                        partials.data_ptr<double>(), stream));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  check_launched(launch_norm_finish(packed.data_ptr<int64_t>(), partials.data_ptr<double>(), plan.num_tensors,
                                    normalize, out.data_ptr<float>(), stream));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static at::Tensor select_topk_tensors_cuda(at::TensorList new_, at::TensorList old, double fraction, bool normalize) {
  check_fraction(fraction);
  const at::Tensor norms = delta_norms_cuda(new_, old, normalize);
  const c10::cuda::CUDAGuard guard(norms.device());
  const int64_t m = norms.numel(), k = num_selected(m, fraction);
  auto out = at::empty({k}, norms.options().dtype(at::kLong));
  if (m == 0) return out;
  check_launched(
      launch_topk_rank(norms.data_ptr<float>(), m, k, out.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static void masked_weighted_average_cuda(at::TensorList dst, at::TensorList sent, const at::Tensor& client_of,
                                         const at::Tensor& tensor_of, const at::Tensor& weights) {
  const MaskedPlan plan = make_masked_plan(dst, sent, client_of, tensor_of, weights);
  if (plan.total_chunks == 0) return;
  const at::Device device = dst[0].device();
#if !defined(FK_CUDA_EMU)  // the emulator runs this launcher on host tensors
  TORCH_CHECK_VALUE(device.is_cuda(), "dst must be CUDA tensors here, got ", device);
#endif
  const c10::cuda::CUDAGuard guard(device);
  const auto packed = to_device(plan.packed, at::kLong, device);
  const auto mw = to_device(plan.member_weight, at::kDouble, device);
  check_launched(launch_masked(packed.data_ptr<int64_t>(), mw.data_ptr<double>(), plan.num_groups, plan.num_members,
                               plan.total_chunks, c10::cuda::getCurrentCUDAStream()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  for (const auto& [work, original] : plan.write_back) original.copy_(work);
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("delta_norms", &delta_norms_cuda);
  m.impl("select_topk_tensors", &select_topk_tensors_cuda);
  m.impl("masked_weighted_average", &masked_weighted_average_cuda);
}

}  // namespace fedkernels
