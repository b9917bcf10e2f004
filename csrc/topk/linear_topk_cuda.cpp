// CUDA launcher of linear_topk (ATen side): checks, allocation and each tile's GEMM (at::mm, cuBLAS);
// the kernels and the tiling are in linear_topk_cuda.cu. Compiled by the host compiler, only in CUDA
// builds (and the emulator's).
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/mm.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

#include "topk/linear_topk_cuda_kernels.h"
#include "topk/topk_checks.h"

namespace fedkernels {

namespace {

std::tuple<at::Tensor, at::Tensor> linear_topk_cuda(const at::Tensor& h, const at::Tensor& W,
                                                    const std::optional<at::Tensor>& bias, int64_t k, double scale) {
  check_linear_topk_args(h, W, bias, k, scale);
  const c10::cuda::CUDAGuard guard(h.device());
  // No gradient flows through this op; its GEMM must not meet a parameter's requires_grad (mm_out refuses).
  const at::NoGradGuard no_grad;
  const int64_t n = h.size(0), p = W.size(0);
  at::Tensor values = at::empty({n, k}, h.options().dtype(at::kFloat));
  at::Tensor indices = at::empty({n, k}, h.options().dtype(at::kLong));
  if (n == 0 || k == 0) return {values, indices};
  const at::Tensor hf = h.to(at::kFloat);  // bfloat16 rows widened exactly; float32 as it is
  const int64_t tile = linear_topk_cuda_tile_cols(n, p);
  const int64_t splits = linear_topk_cuda_splits(n, tile);
  const auto u64 = h.options().dtype(at::kLong);  // composites live in int64 storage
  at::Tensor best = at::zeros({n, splits, k}, u64);
  at::Tensor scratch = at::empty({n, splits, k}, u64);
  at::Tensor zbuf = at::empty({n * tile}, h.options().dtype(at::kFloat));
  auto* best_p = reinterpret_cast<uint64_t*>(best.data_ptr<int64_t>());
  auto* scratch_p = reinterpret_cast<uint64_t*>(scratch.data_ptr<int64_t>());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  for (int64_t j0 = 0; j0 < p; j0 += tile) {
    const int64_t cols = std::min(tile, p - j0);
    at::Tensor z = zbuf.narrow(0, 0, n * cols).view({n, cols});
    at::mm_out(z, hf, W.narrow(0, j0, cols).to(at::kFloat).t());
    at::Tensor bias_tile;
    if (bias.has_value()) bias_tile = bias->narrow(0, j0, cols).to(at::kFloat).contiguous();
    launch_linear_topk_tile(z.data_ptr<float>(), n, cols, j0,
                            bias_tile.defined() ? bias_tile.data_ptr<float>() : nullptr, static_cast<float>(scale), k,
                            splits, best_p, scratch_p, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (splits > 1) {
    launch_linear_topk_merge(n, k, splits, best_p, scratch_p, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  launch_linear_topk_finish(best_p, n, k, splits * k, values.data_ptr<float>(), indices.data_ptr<int64_t>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {values, indices};
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("linear_topk", &linear_topk_cuda); }

}  // namespace fedkernels
