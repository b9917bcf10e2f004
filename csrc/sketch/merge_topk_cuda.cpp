// CUDA launcher of bucket_merge_topk (the torch side): checks, allocation, dispatch between the fast and
// the general path; the kernels are in merge_topk_cuda.cu. Compiled by the host compiler, only in
// CUDA builds (and the emulator's).

#include <cstdint>
#include <type_traits>

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "sketch/merge_topk_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

template <typename scalar_t, int KCAP>
static void launch_fast(const MergeArgs& a, int64_t k, scalar_t* vals, int64_t* ids) {
  const cudaStream_t stream = current_cuda_stream(a.logp);
  const TopkLaunch L = topk_launch(a.n_rows, a.p, a.r, a.nb);
  const scalar_t* lp = a.logp.const_data_ptr<scalar_t>();
  const int32_t* tb = a.table.const_data_ptr<int32_t>();
  Tensor part;
  uint64_t* part_ptr = nullptr;
  if (L.splits > 1) {
    part = empty_on(a.logp, {a.n_rows, L.splits, k}, ScalarType::Long);
    part_ptr = reinterpret_cast<uint64_t*>(part.mutable_data_ptr<int64_t>());
  }
  launch_topk_scan<scalar_t, KCAP>(lp, tb, a.n_rows, a.nb, a.p, a.r, a.reduce, static_cast<int>(k), L, vals, ids,
                                   part_ptr, stream);
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  if (L.splits > 1) {
    launch_topk_merge<scalar_t, KCAP>(lp, tb, a.n_rows, a.nb, a.r, a.reduce, static_cast<int>(k), L, part_ptr, vals,
                                      ids, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

static std::tuple<Tensor, Tensor> bucket_merge_topk_cuda(const Tensor& logp, const Tensor& table, int64_t k,
                                                         std::string reduce_name) {
  const CudaDeviceGuard guard(logp);
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  std::tuple<Tensor, Tensor> out = alloc_topk(a, k);
  Tensor& values = std::get<0>(out);
  Tensor& indices = std::get<1>(out);
  if (values.numel() == 0) return out;
  FK_DISPATCH_FLOAT_HALF_BF16(a.logp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    scalar_t* vals = values.mutable_data_ptr<scalar_t>();
    int64_t* ids = indices.mutable_data_ptr<int64_t>();
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
                                  a.p, a.r, a.reduce, k, vals, ids, current_cuda_stream(a.logp));
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("bucket_merge_topk", TORCH_BOX(&bucket_merge_topk_cuda)); }

}  // namespace fedkernels
