// CUDA launcher of linear_cross_entropy: for each class chunk, a cuBLAS GEMM builds the [N, chunk]
// logit block, and a small kernel (one warp per row) folds it into the online log-sum-exp
// (forward) or turns it into d/dlogits (backward). The per-row math is sampled.h's, as on the CPU.
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

#include <tuple>

#include "sampled/lce_host.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void lce_forward_chunk_kernel(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index,
                                         int64_t n, int64_t c0, int64_t cols, T* run_max, T* run_sum, T* target_logit) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  T* zr = z + r * cols;
  lce_finish_logits(zr, bias, scale, cols, lane, 32);
  __syncwarp();
  LseState<T> part = lse_of_chunk(zr, cols, lane, 32);
  // Fixed butterfly: every lane ends with the same merge of all 32 partials.
  for (int off = 16; off > 0; off >>= 1) {
    const T m2 = __shfl_xor_sync(0xffffffffu, part.max, off);
    const T s2 = __shfl_xor_sync(0xffffffffu, part.sum, off);
    lse_merge(&part, m2, s2);
  }
  if (lane == 0) {
    LseState<T> st{run_max[r], run_sum[r]};
    lse_merge(&st, part.max, part.sum);
    run_max[r] = st.max;
    run_sum[r] = st.sum;
    const int64_t tc = target[r] - c0;
    if (target[r] != ignore_index && tc >= 0 && tc < cols) target_logit[r] = zr[tc];
  }
}

template <typename T>
__global__ void lce_forward_finish_kernel(const T* run_max, const T* run_sum, const T* target_logit,
                                          const int64_t* target, int64_t ignore_index, int64_t n, T* loss, T* lse) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  lse[r] = lse_value(LseState<T>{run_max[r], run_sum[r]});
  loss[r] = lce_sample_loss(lse[r], target_logit[r], target[r] == ignore_index);
}

template <typename T>
__global__ void lce_backward_chunk_kernel(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index,
                                          int64_t n, int64_t c0, int64_t cols, const T* lse, const T* g_loss,
                                          const T* g_lse) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  T* zr = z + r * cols;
  lce_finish_logits(zr, bias, scale, cols, lane, 32);
  const int64_t tc = target[r] != ignore_index ? target[r] - c0 : -1;
  lce_dlogits(zr, cols, lse[r], g_loss[r], g_lse[r], tc, lane, 32);
}

static unsigned row_blocks(int64_t n) {
  TORCH_CHECK(n <= int64_t(INT32_MAX) * kWarpsPerBlock, "linear_cross_entropy: too many samples for one CUDA call");
  return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
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
        lce_forward_chunk_kernel<scalar_t><<<row_blocks(n), kWarpsPerBlock * 32, 0, stream>>>(
            z.data_ptr<scalar_t>(), bb.defined() ? bb.data_ptr<scalar_t>() + c0 : nullptr, static_cast<scalar_t>(scale),
            tgt.data_ptr<int64_t>(), ignore_index, n, c0, cols, run_max.data_ptr<scalar_t>(),
            run_sum.data_ptr<scalar_t>(), target_logit.data_ptr<scalar_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      lce_forward_finish_kernel<scalar_t><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
          run_max.data_ptr<scalar_t>(), run_sum.data_ptr<scalar_t>(), target_logit.data_ptr<scalar_t>(),
          tgt.data_ptr<int64_t>(), ignore_index, n, loss.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>());
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
        lce_backward_chunk_kernel<scalar_t><<<row_blocks(n), kWarpsPerBlock * 32, 0, stream>>>(
            z.data_ptr<scalar_t>(), bb.defined() ? bb.data_ptr<scalar_t>() + c0 : nullptr, static_cast<scalar_t>(scale),
            tgt.data_ptr<int64_t>(), ignore_index, n, c0, cols, l.data_ptr<scalar_t>(), gl.data_ptr<scalar_t>(),
            gs.data_ptr<scalar_t>());
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
