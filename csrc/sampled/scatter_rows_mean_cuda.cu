// CUDA launcher of scatter_rows_mean: one block per output row and column slice, threads over
// columns, sources summed in their stable order (sampled.h's per-row math, as the CPU twin
// scatter_rows_mean_cpu.cpp).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "common/dispatch.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

template <typename acc_t>
__global__ void segment_weight_sum_kernel(const int64_t* seg, const int64_t* perm, const acc_t* w, int64_t num_rows,
                                          acc_t* wsum, acc_t* wscale) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= num_rows) return;
  wsum[u] = row_scaled_weight_sum(w, perm, seg[u], seg[u + 1], &wscale[u]);
}

constexpr int64_t kScatterCols = 1024;  // columns per block (the accumulator lives in shared memory)

template <typename scalar_t, typename acc_t>
__global__ void scatter_rows_mean_kernel(scalar_t* out, const scalar_t* src, const int64_t* rows, const int64_t* seg,
                                         const int64_t* perm, const acc_t* w, const acc_t* wsum, const acc_t* wscale,
                                         int64_t d) {
  __shared__ acc_t acc[kScatterCols];
  const int64_t u = blockIdx.x, c0 = static_cast<int64_t>(blockIdx.y) * kScatterCols;
  const int64_t cols = d - c0 < kScatterCols ? d - c0 : kScatterCols;
  // Each thread owns columns threadIdx.x + k * blockDim.x of acc: no synchronisation needed.
  // The same steps as the CPU (sampled.h): first source, the middle ones, the last one with the division.
  const int64_t s0 = seg[u], s1 = seg[u + 1];
  scalar_t* o = out + rows[u] * d + c0;
  const int64_t first = perm[s0], last = perm[s1 - 1];
  const acc_t sc = wscale[u];
  if (s1 - s0 == 1) {
    weighted_row_only(o, src + first * d + c0, w[first] * sc, wsum[u], cols, threadIdx.x, blockDim.x);
    return;
  }
  weighted_row_first(acc, src + first * d + c0, w[first] * sc, cols, threadIdx.x, blockDim.x);
  for (int64_t t = s0 + 1; t + 1 < s1; ++t) {
    const int64_t p = perm[t];
    weighted_row_accumulate(acc, src + p * d + c0, w[p] * sc, cols, threadIdx.x, blockDim.x);
  }
  weighted_row_last(o, acc, src + last * d + c0, w[last] * sc, wsum[u], cols, threadIdx.x, blockDim.x);
}

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
    segment_weight_sum_kernel<acc_t><<<static_cast<unsigned>((num_rows + 255) / 256), 256, 0, stream>>>(
        segs.seg.data_ptr<int64_t>(), segs.perm.data_ptr<int64_t>(), w_acc.data_ptr<acc_t>(), num_rows,
        wsum.data_ptr<acc_t>(), wscale.data_ptr<acc_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // A zero-weight row is reported before out is touched.
    const auto zero = wsum.le(0);
    if (zero.any().item<bool>()) {
      const int64_t row = segs.rows.masked_select(zero)[0].item<int64_t>();
      TORCH_CHECK_VALUE(false, "weight of the sources of row ", row, " sums to 0: its mean is undefined");
    }
    TORCH_CHECK(num_rows <= INT32_MAX, "scatter_rows_mean: at most 2^31 - 1 distinct rows per call on CUDA");
    const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>((d + kScatterCols - 1) / kScatterCols));
    scatter_rows_mean_kernel<scalar_t, acc_t>
        <<<grid, 256, 0, stream>>>(out.data_ptr<scalar_t>(), source.data_ptr<scalar_t>(), segs.rows.data_ptr<int64_t>(),
                                   segs.seg.data_ptr<int64_t>(), segs.perm.data_ptr<int64_t>(), w_acc.data_ptr<acc_t>(),
                                   wsum.data_ptr<acc_t>(), wscale.data_ptr<acc_t>(), d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("scatter_rows_mean", &scatter_rows_mean_cuda); }

}  // namespace fedkernels
