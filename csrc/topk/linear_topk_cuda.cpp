// CUDA launcher of linear_topk (the torch side): checks, allocation and each tile's GEMM (aten::mm.out,
// cuBLAS); the kernels and the tiling are in linear_topk_cuda.cu. Compiled by the host compiler, only in
// CUDA builds (and the emulator's).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/tensor.h"
#include "common/stable/topk_extra.h"
#include "topk/linear_topk_cuda_kernels.h"
#include "topk/topk_checks.h"

namespace fedkernels {

namespace {

std::tuple<Tensor, Tensor> linear_topk_cuda(const Tensor& h, const Tensor& W, const std::optional<Tensor>& bias,
                                            int64_t k, double scale) {
  check_linear_topk_args(h, W, bias, k, scale);
  const CudaDeviceGuard guard(h);
  // No gradient flows through this op; its GEMM must not meet a parameter's requires_grad (mm_out refuses).
  const NoGradGuard no_grad;
  const int64_t n = h.size(0), p = W.size(0);
  Tensor values = empty_on(h, {n, k}, ScalarType::Float);
  Tensor indices = empty_on(h, {n, k}, ScalarType::Long);
  if (n == 0 || k == 0) return {values, indices};
  const Tensor hf = torch::stable::to(h, ScalarType::Float);  // bfloat16 rows widened exactly; float32 as it is
  const int64_t tile = linear_topk_cuda_tile_cols(n, p);
  const int64_t splits = linear_topk_cuda_splits(n, tile);
  // composites live in int64 storage
  Tensor best = zeros_on(h, {n, splits, k}, ScalarType::Long);
  Tensor scratch = empty_on(h, {n, splits, k}, ScalarType::Long);
  Tensor zbuf = empty_on(h, {n * tile}, ScalarType::Float);
  auto* best_p = reinterpret_cast<uint64_t*>(best.mutable_data_ptr<int64_t>());
  auto* scratch_p = reinterpret_cast<uint64_t*>(scratch.mutable_data_ptr<int64_t>());
  const cudaStream_t stream = current_cuda_stream(h);
  for (int64_t j0 = 0; j0 < p; j0 += tile) {
    const int64_t cols = std::min(tile, p - j0);
    const Tensor z = torch::stable::view(narrow(zbuf, 0, 0, n * cols), {n, cols});
    mm_out(z, hf, torch::stable::transpose(torch::stable::to(narrow(W, 0, j0, cols), ScalarType::Float), 0, 1));
    std::optional<Tensor> bias_tile;
    if (bias.has_value()) {
      bias_tile = contiguous_or_self(torch::stable::to(narrow(*bias, 0, j0, cols), ScalarType::Float));
    }
    launch_linear_topk_tile(z.const_data_ptr<float>(), n, cols, j0,
                            bias_tile.has_value() ? bias_tile->const_data_ptr<float>() : nullptr,
                            static_cast<float>(scale), k, splits, best_p, scratch_p, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (splits > 1) {
    launch_linear_topk_merge(n, k, splits, best_p, scratch_p, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  }
  launch_linear_topk_finish(best_p, n, k, splits * k, values.mutable_data_ptr<float>(),
                            indices.mutable_data_ptr<int64_t>(), stream);
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return {values, indices};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("linear_topk", TORCH_BOX(&linear_topk_cuda)); }

}  // namespace fedkernels
