// CUDA launchers of linear_cross_entropy and its backward (ATen side): checks, the per-chunk cuBLAS
// GEMMs (at::mm) and the gradient GEMMs, allocation, dispatch; the per-row kernels are in
// linear_cross_entropy_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <ATen/TensorOperators.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <cstdint>
#include <limits>
#include <tuple>

#include "sampled/lce_host.h"
#include "sampled/linear_cross_entropy_cuda_kernels.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

// Before each chunk kernel: it launches one block per kLceWarpsPerBlock rows.
static void check_row_blocks(int64_t n) {
  TORCH_CHECK(n <= int64_t(INT32_MAX) * kLceWarpsPerBlock, "linear_cross_entropy: too many samples for one CUDA call");
}

static std::tuple<at::Tensor, at::Tensor> linear_cross_entropy_cuda(const at::Tensor& h, const at::Tensor& W,
                                                                    const at::Tensor& target,
                                                                    const std::optional<at::Tensor>& bias, double scale,
                                                                    int64_t ignore_index, c10::string_view reduction,
                                                                    int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  const c10::cuda::CUDAGuard guard(h.device());
  const auto acc = acc_dtype_of(h.scalar_type());
  const LceInputs in(h, W, bias);
  const auto &hh = in.h, &ww = in.W, &bb = in.bias;
  const auto tgt = target.contiguous();
  const int64_t n = hh.size(0), s = ww.size(0);
  const LcePlan plan(n, s, chunk_size);
  auto run_max = at::full({n}, -std::numeric_limits<double>::infinity(), hh.options());
  auto run_sum = at::zeros({n}, hh.options());
  auto target_logit = at::zeros({n}, hh.options());
  auto loss = at::empty({n}, hh.options());
  auto lse = at::empty({n}, hh.options());
  if (n > 0) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(acc, "linear_cross_entropy_cuda", [&] {
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, s);
        auto z = at::mm(hh, ww.narrow(0, c0, cols).t());
        check_row_blocks(n);
        launch_lce_forward_chunk<scalar_t>(
            z.data_ptr<scalar_t>(), bb.defined() ? bb.data_ptr<scalar_t>() + c0 : nullptr, static_cast<scalar_t>(scale),
            tgt.data_ptr<int64_t>(), ignore_index, n, c0, cols, run_max.data_ptr<scalar_t>(),
            run_sum.data_ptr<scalar_t>(), target_logit.data_ptr<scalar_t>(), stream);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      launch_lce_forward_finish<scalar_t>(run_max.data_ptr<scalar_t>(), run_sum.data_ptr<scalar_t>(),
                                          target_logit.data_ptr<scalar_t>(), tgt.data_ptr<int64_t>(), ignore_index, n,
                                          loss.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), stream);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  if (red == 0) return {loss, lse};
  const auto total = loss.sum();  // a fixed-order device reduction
  if (red == 1) return {total, lse};
  const auto count = tgt.ne(ignore_index).sum().clamp_min(1).to(acc);
  return {total / count, lse};  // no live sample: total is 0, so the mean is 0
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_cross_entropy_backward_cuda(
    const at::Tensor& h, const at::Tensor& W, const at::Tensor& target, const std::optional<at::Tensor>& bias,
    const at::Tensor& lse, const at::Tensor& grad_loss, const at::Tensor& grad_lse, double scale, int64_t ignore_index,
    int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  check_lce_backward_args(h, lse, grad_loss, grad_lse);
  const c10::cuda::CUDAGuard guard(h.device());
  const auto acc = acc_dtype_of(h.scalar_type());
  const LceInputs in(h, W, bias);
  const auto &hh = in.h, &ww = in.W, &bb = in.bias;
  const auto tgt = target.contiguous();
  const auto l = lse.contiguous(), gl = grad_loss.contiguous(), gs = grad_lse.contiguous();
  const int64_t n = hh.size(0), s = ww.size(0);
  const LcePlan plan(n, s, chunk_size);
  auto grad_h = at::zeros_like(hh);
  auto grad_W = at::zeros_like(ww);
  auto grad_bias = at::zeros({bias.has_value() ? s : 0}, hh.options());
  if (n > 0) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(acc, "linear_cross_entropy_backward_cuda", [&] {
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, s);
        const auto Wc = ww.narrow(0, c0, cols);
        auto z = at::mm(hh, Wc.t());
        check_row_blocks(n);
        launch_lce_backward_chunk<scalar_t>(
            z.data_ptr<scalar_t>(), bb.defined() ? bb.data_ptr<scalar_t>() + c0 : nullptr, static_cast<scalar_t>(scale),
            tgt.data_ptr<int64_t>(), ignore_index, n, c0, cols, l.data_ptr<scalar_t>(), gl.data_ptr<scalar_t>(),
            gs.data_ptr<scalar_t>(), stream);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        // Chunks in order: grad_h accumulates in a fixed order; grad_W / grad_bias rows are owned.
        grad_h.addmm_(z, Wc, 1, scale);
        grad_W.narrow(0, c0, cols).addmm_(z.t(), hh, 1, scale);
        if (bb.defined()) grad_bias.narrow(0, c0, cols).copy_(z.sum(0));
      }
    });
  }
  return lce_grads_in_input_dtypes(grad_h, grad_W, grad_bias, h, W, bias);
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("linear_cross_entropy", &linear_cross_entropy_cuda);
  m.impl("linear_cross_entropy_backward", &linear_cross_entropy_backward_cuda);
}

}  // namespace fedkernels
