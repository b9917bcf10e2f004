// CUDA launchers of bucket_merge and its backward (ATen side): checks, allocation, dispatch; the
// kernel is in merge_cuda.cu, the backward is count_sketch's row gather with every sign +1, divided
// by R (count_sketch_cuda.cpp). Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "common/dispatch.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/merge_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

static at::Tensor bucket_merge_cuda(const at::Tensor& logp, const at::Tensor& table, c10::string_view reduce_name) {
  const c10::cuda::CUDAGuard guard(logp.device());
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  auto out = at::empty({n_rows, p}, lp.options());
  if (out.numel() == 0) return out;
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge", [&] {
    launch_bucket_merge<scalar_t>(lp.const_data_ptr<scalar_t>(), tb.const_data_ptr<int32_t>(), n_rows, nb, p, r, reduce,
                                  out.data_ptr<scalar_t>(), c10::cuda::getCurrentCUDAStream());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static at::Tensor bucket_merge_backward_cuda(const at::Tensor& grad, const at::Tensor& table, int64_t num_buckets) {
  check_merge_backward_args(grad, table, num_buckets);
  const c10::cuda::CUDAGuard guard(grad.device());
  const auto tb = table.contiguous();
  const int64_t n_rows = grad.size(0), r = tb.size(1);
  auto out = at::empty({r, n_rows, num_buckets}, grad.options());
  if (out.numel() == 0) return out;
  count_sketch_rows_cuda(grad.contiguous(), tb, std::nullopt, num_buckets, out, num_buckets, n_rows * num_buckets,
                         static_cast<double>(r));
  return out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("bucket_merge", &bucket_merge_cuda);
  m.impl("bucket_merge_backward", &bucket_merge_backward_cuda);
}

}  // namespace fedkernels
