// CUDA launchers of the partial-weight-exchange family (the torch side): checks, the packed plans of
// select_plan.h and their copy to the device, allocation; the kernels are in select_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <algorithm>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/tensor.h"
#include "select/select.h"
#include "select/select_checks.h"
#include "select/select_cuda_kernels.h"
#include "select/select_plan.h"

namespace fedkernels {

// Host vector -> device tensor through pinned memory, asynchronously on the current stream (the
// caching host allocator keeps the pinned block alive until the copy has run).
// (The CUDA emulator has no pinned memory; there the staging tensor is ordinary host memory.)
template <typename T>
static Tensor to_device(const std::vector<T>& host, ScalarType dtype, const Device& device) {
#if defined(FK_CUDA_EMU)
  constexpr bool kPinned = false;
#else
  constexpr bool kPinned = true;
#endif
  Tensor pinned = torch::stable::empty({static_cast<int64_t>(host.size())}, dtype, std::nullopt, cpu_device(), kPinned);
  std::copy(host.begin(), host.end(), static_cast<T*>(pinned.mutable_data_ptr()));
  return torch::stable::to(pinned, device, /*non_blocking=*/true);
}

// A launch function's refusal (a grid over 2^31 - 1 blocks) as an error.
static void check_launched(bool launched) { FK_CHECK(launched, "select: at most 2^31 - 1 chunks per call on CUDA"); }

static Tensor delta_norms_cuda(const std::vector<Tensor>& new_, const std::vector<Tensor>& old, bool normalize) {
  check_tensor_pairs(new_, old);
  // Empty lists carry no device (the dispatcher never routes them here on a GPU; the emulator can):
  // no tensors, no norms, and no new_[0] to read.
  if (new_.empty()) return torch::stable::empty({0}, ScalarType::Float);
  const CudaDeviceGuard guard(new_[0]);
  const NormPlan plan = make_norm_plan(new_, old);
  Tensor out = empty_on(new_[0], {plan.num_tensors}, ScalarType::Float);
  if (plan.num_tensors == 0) return out;
  const Tensor packed = to_device(plan.packed, ScalarType::Long, new_[0].device());
  Tensor partials = empty_on(out, {std::max<int64_t>(plan.total_chunks, 1)}, ScalarType::Double);
  const cudaStream_t stream = current_cuda_stream(out);
  if (plan.total_chunks > 0) {
    check_launched(launch_norm_partials(packed.const_data_ptr<int64_t>(), plan.num_tensors, plan.total_chunks,
                                        partials.mutable_data_ptr<double>(), stream));
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  }
  check_launched(launch_norm_finish(packed.const_data_ptr<int64_t>(), partials.const_data_ptr<double>(),
                                    plan.num_tensors, normalize, out.mutable_data_ptr<float>(), stream));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static Tensor select_topk_tensors_cuda(const std::vector<Tensor>& new_, const std::vector<Tensor>& old, double fraction,
                                       bool normalize) {
  check_fraction(fraction);
  const Tensor norms = delta_norms_cuda(new_, old, normalize);
  const CudaDeviceGuard guard(norms);
  const int64_t m = norms.numel(), k = num_selected(m, fraction);
  Tensor out = empty_on(norms, {k}, ScalarType::Long);
  if (m == 0) return out;
  check_launched(launch_topk_rank(norms.const_data_ptr<float>(), m, k, out.mutable_data_ptr<int64_t>(),
                                  current_cuda_stream(norms)));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static void masked_weighted_average_cuda(const std::vector<Tensor>& dst, const std::vector<Tensor>& sent,
                                         const Tensor& client_of, const Tensor& tensor_of, const Tensor& weights) {
  const MaskedPlan plan = make_masked_plan(dst, sent, client_of, tensor_of, weights);
  if (plan.total_chunks == 0) return;
#if !defined(FK_CUDA_EMU)  // the emulator runs this launcher on host tensors
  FK_CHECK_VALUE(dst[0].is_cuda(), "dst must be CUDA tensors here, got ", device_text(dst[0]));
#endif
  const CudaDeviceGuard guard(dst[0]);
  const Tensor packed = to_device(plan.packed, ScalarType::Long, dst[0].device());
  const Tensor mw = to_device(plan.member_weight, ScalarType::Double, dst[0].device());
  check_launched(launch_masked(packed.const_data_ptr<int64_t>(), mw.const_data_ptr<double>(), plan.num_groups,
                               plan.num_members, plan.total_chunks, current_cuda_stream(dst[0])));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  for (auto [work, original] : plan.write_back) torch::stable::copy_(original, work);
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("delta_norms", TORCH_BOX(&delta_norms_cuda));
  m.impl("select_topk_tensors", TORCH_BOX(&select_topk_tensors_cuda));
  m.impl("masked_weighted_average", TORCH_BOX(&masked_weighted_average_cuda));
}

}  // namespace fedkernels
