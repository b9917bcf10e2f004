// CUDA launcher of bucket_merge_topk (ATen side): checks, allocation, dispatch between the fast and
// the general path; the kernels are in merge_topk_cuda.cu. Compiled by the host compiler, only in
// CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <type_traits>

#include "common/dispatch.h"
#include "sketch/merge_topk_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

template <typename scalar_t, int KCAP>
static void launch_fast(const MergeArgs& a, int64_t k, scalar_t* vals, int64_t* ids) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const TopkLaunch L = topk_launch(a.n_rows, a.p, a.r, a.nb);
  const scalar_t* lp = a.logp.const_data_ptr<scalar_t>();
  const int32_t* tb = a.table.const_data_ptr<int32_t>();
  at::Tensor part;
  uint64_t* part_ptr = nullptr;
  if (L.splits > 1) {
    part = at::empty({a.n_rows, L.splits, k}, a.logp.options().dtype(at::kLong));
    part_ptr = reinterpret_cast<uint64_t*>(part.data_ptr<int64_t>());
  }
  launch_topk_scan<scalar_t, KCAP>(lp, tb, a.n_rows, a.nb, a.p, a.r, a.reduce, static_cast<int>(k), L, vals, ids,
                                   part_ptr, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (L.splits > 1) {
    launch_topk_merge<scalar_t, KCAP>(lp, tb, a.n_rows, a.nb, a.r, a.reduce, static_cast<int>(k), L, part_ptr, vals,
                                      ids, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

static std::tuple<at::Tensor, at::Tensor> bucket_merge_topk_cuda(const at::Tensor& logp, const at::Tensor& table,
                                                                 int64_t k, c10::string_view reduce_name) {
  const c10::cuda::CUDAGuard guard(logp.device());
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  auto out = alloc_topk(a, k);
  at::Tensor& values = std::get<0>(out);
  at::Tensor& indices = std::get<1>(out);
  if (values.numel() == 0) return out;
  FK_DISPATCH_FLOAT_HALF_BF16(a.logp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    scalar_t* vals = values.data_ptr<scalar_t>();
    int64_t* ids = indices.data_ptr<int64_t>();
    if constexpr (std::is_same_v<acc_t, float>) {
      if (k <= kLargeK && a.p <= int64_t(UINT32_MAX)) {
        if (k <= kSmallK)
          launch_fast<scalar_t, kSmallK>(a, k, vals, ids);
        else
          launch_fast<scalar_t, kLargeK>(a, k, vals, ids);
        return;
      }
    }
    launch_topk_general<scalar_t>(a.logp.const_data_ptr<scalar_t>(), a.table.const_data_ptr<int32_t>(), a.n_rows, a.nb,
                                  a.p, a.r, a.reduce, k, vals, ids, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("bucket_merge_topk", &bucket_merge_topk_cuda); }

}  // namespace fedkernels
