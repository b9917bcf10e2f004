// CUDA launcher of scatter_rows_mean (the torch side): checks, the row segments (a stable sort), the
// weights in the accumulation dtype, the zero-weight check, dispatch; the kernels are in
// scatter_rows_mean_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <cstdint>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"
#include "sampled/scatter_rows_mean_cuda_kernels.h"

namespace fedkernels {

static void scatter_rows_mean_cuda(Tensor& out, const Tensor& idx, const Tensor& src, const Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  const CudaDeviceGuard guard(out);
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const RowSegments segs = build_row_segments(contiguous_or_self(idx));
  const Tensor source = contiguous_or_self(src);
  const int64_t d = out.size(1), num_rows = segs.rows.numel();
  const cudaStream_t stream = current_cuda_stream(out);
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cuda", [&] {
    using acc_t = opmath_t<scalar_t>;
    const Tensor w_acc = contiguous_or_self(to_dtype(weight, opmath_scalar_type<scalar_t>()));
    Tensor wsum = empty_on(w_acc, {num_rows});
    Tensor wscale = empty_on(w_acc, {num_rows});
    launch_segment_weight_sum<acc_t>(segs.seg.const_data_ptr<int64_t>(), segs.perm.const_data_ptr<int64_t>(),
                                     w_acc.const_data_ptr<acc_t>(), num_rows, wsum.mutable_data_ptr<acc_t>(),
                                     wscale.mutable_data_ptr<acc_t>(), stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
    // A zero-weight row is reported before out is touched.
    const Tensor zero = aten::le(wsum, host_scalar_double(0.0));
    if (item_bool(any(zero))) {
      const int64_t row = item_int64(narrow_view(aten::masked_select(segs.rows, zero), 0, 0, 1));
      FK_CHECK_VALUE(false, "weight of the sources of row ", row, " sums to 0: its mean is undefined");
    }
    FK_CHECK(num_rows <= INT32_MAX, "scatter_rows_mean: at most 2^31 - 1 distinct rows per call on CUDA");
    launch_scatter_rows_mean<scalar_t, acc_t>(
        out.mutable_data_ptr<scalar_t>(), source.const_data_ptr<scalar_t>(), segs.rows.const_data_ptr<int64_t>(),
        segs.seg.const_data_ptr<int64_t>(), segs.perm.const_data_ptr<int64_t>(), w_acc.const_data_ptr<acc_t>(),
        wsum.const_data_ptr<acc_t>(), wscale.const_data_ptr<acc_t>(), num_rows, d, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("scatter_rows_mean", TORCH_BOX(&scatter_rows_mean_cuda)); }

}  // namespace fedkernels
