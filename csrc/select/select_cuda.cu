// CUDA launchers of the partial-weight-exchange family, multi-tensor-apply style: the packed plan
// of select_plan.h (tensor pointers, sizes, dtypes, chunk owners) goes to the device in one copy,
// then one launch covers every chunk of every tensor (one block per chunk). Norms reduce each
// block with cub::BlockReduce (a fixed tree) and then each tensor's chunk partials in chunk order,
// so no floating-point atomics are involved and results are deterministic.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include <cub/block/block_reduce.cuh>

#include "select/select.h"
#include "select/select_checks.h"
#include "select/select_plan.h"

namespace fedkernels {

constexpr int kThreads = 256;

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

__global__ void norm_partials_kernel(const int64_t* packed, int64_t num_tensors, double* partials) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t c = blockIdx.x;
  const double mine = norm_chunk_partial(packed, num_tensors, c, threadIdx.x, blockDim.x);
  const double total = Reduce(tmp).Sum(mine);
  if (threadIdx.x == 0) partials[c] = total;
}

__global__ void norm_finish_kernel(const int64_t* packed, const double* partials, int64_t num_tensors, bool normalize,
                                   float* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < num_tensors) out[t] = norm_of_tensor(packed, partials, t, normalize);
}

// Rank selection: item i's rank is the number of items that rank before it (a strict total
// order), so every rank is taken exactly once. O(M^2) comparisons; M is a model's tensor count.
__global__ void topk_rank_kernel(const float* norms, int64_t m, int64_t k, int64_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  int64_t rank = 0;
  for (int64_t j = 0; j < m; ++j) rank += ranks_before(norms[j], j, norms[i], i) ? 1 : 0;
  if (rank < k) out[rank] = i;
}

__global__ void masked_kernel(const int64_t* packed, const double* member_weight, int64_t num_groups,
                              int64_t num_members) {
  masked_chunk(packed, member_weight, num_groups, num_members, blockIdx.x, threadIdx.x, blockDim.x);
}

static unsigned blocks_for(int64_t items) {
  TORCH_CHECK(items <= INT32_MAX, "select: at most 2^31 - 1 chunks per call on CUDA");
  return static_cast<unsigned>(items);
}

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
    norm_partials_kernel<<<blocks_for(plan.total_chunks), kThreads, 0, stream>>>(
        packed.data_ptr<int64_t>(), plan.num_tensors, partials.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  norm_finish_kernel<<<blocks_for((plan.num_tensors + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      packed.data_ptr<int64_t>(), partials.data_ptr<double>(), plan.num_tensors, normalize, out.data_ptr<float>());
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
  topk_rank_kernel<<<blocks_for((m + kThreads - 1) / kThreads), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      norms.data_ptr<float>(), m, k, out.data_ptr<int64_t>());
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
  masked_kernel<<<blocks_for(plan.total_chunks), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      packed.data_ptr<int64_t>(), mw.data_ptr<double>(), plan.num_groups, plan.num_members);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  for (const auto& [work, original] : plan.write_back) original.copy_(work);
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("delta_norms", &delta_norms_cuda);
  m.impl("select_topk_tensors", &select_topk_tensors_cuda);
  m.impl("masked_weighted_average", &masked_weighted_average_cuda);
}

}  // namespace fedkernels
