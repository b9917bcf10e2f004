// CUDA launcher of scatter_rows_mean (ATen side): checks, the row segments (a stable sort), the
// weights in the accumulation dtype, the zero-weight check, dispatch; the kernels are in
// scatter_rows_mean_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "common/dispatch.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"
#include "sampled/scatter_rows_mean_cuda_kernels.h"

namespace fedkernels {

static void scatter_rows_mean_cuda(at::Tensor& out, const at::Tensor& idx, const at::Tensor& src,
                                   const at::Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  const c10::cuda::CUDAGuard guard(out.device());
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const auto segs = build_row_segments(idx.contiguous());
  const auto source = src.contiguous();
  const int64_t d = out.size(1), num_rows = segs.rows.numel();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto w_acc = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    auto wsum = at::empty({num_rows}, w_acc.options());
    auto wscale = at::empty({num_rows}, w_acc.options());
    launch_segment_weight_sum<acc_t>(segs.seg.data_ptr<int64_t>(), segs.perm.data_ptr<int64_t>(),
                                     w_acc.data_ptr<acc_t>(), num_rows, wsum.data_ptr<acc_t>(),
                                     wscale.data_ptr<acc_t>(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // A zero-weight row is reported before out is touched.
    const auto zero = wsum.le(0);
    if (zero.any().item<bool>()) {
      const int64_t row = segs.rows.masked_select(zero)[0].item<int64_t>();
      TORCH_CHECK_VALUE(false, "weight of the sources of row ", row, " sums to 0: its mean is undefined");
    }
    TORCH_CHECK(num_rows <= INT32_MAX, "scatter_rows_mean: at most 2^31 - 1 distinct rows per call on CUDA");
    launch_scatter_rows_mean<scalar_t, acc_t>(out.data_ptr<scalar_t>(), source.data_ptr<scalar_t>(),
                                              segs.rows.data_ptr<int64_t>(), segs.seg.data_ptr<int64_t>(),
                                              segs.perm.data_ptr<int64_t>(), w_acc.data_ptr<acc_t>(),
                                              wsum.data_ptr<acc_t>(), wscale.data_ptr<acc_t>(), num_rows, d, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("scatter_rows_mean", &scatter_rows_mean_cuda); }

}  // namespace fedkernels
