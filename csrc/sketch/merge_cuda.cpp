// CUDA launchers of bucket_merge and its backward (the torch side): checks, allocation, dispatch; the
// kernel is in merge_cuda.cu, the backward is count_sketch's row gather with every sign +1, divided
// by R (count_sketch_cuda.cpp). Compiled by the host compiler, only in CUDA builds (and the emulator's).

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/merge_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

static Tensor bucket_merge_cuda(const Tensor& logp, const Tensor& table, std::string reduce_name) {
  const CudaDeviceGuard guard(logp);
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  Tensor out = empty_on(lp, {n_rows, p});
  if (out.numel() == 0) return out;
  const cudaStream_t stream = current_cuda_stream(lp);
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge", [&] {
    launch_bucket_merge<scalar_t>(lp.const_data_ptr<scalar_t>(), tb.const_data_ptr<int32_t>(), n_rows, nb, p, r, reduce,
                                  out.mutable_data_ptr<scalar_t>(), stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static Tensor bucket_merge_backward_cuda(const Tensor& grad, const Tensor& table, int64_t num_buckets) {
  check_merge_backward_args(grad, table, num_buckets);
  const CudaDeviceGuard guard(grad);
  const Tensor tb = contiguous_or_self(table);
  const int64_t n_rows = grad.size(0), r = tb.size(1);
  Tensor out = empty_on(grad, {r, n_rows, num_buckets});
  if (out.numel() == 0) return out;
  count_sketch_rows_cuda(contiguous_or_self(grad), tb, std::nullopt, num_buckets, out, num_buckets,
                         n_rows * num_buckets, static_cast<double>(r));
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("bucket_merge", TORCH_BOX(&bucket_merge_cuda));
  m.impl("bucket_merge_backward", TORCH_BOX(&bucket_merge_backward_cuda));
}

}  // namespace fedkernels
