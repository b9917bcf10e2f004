// CPU launcher of linear_cross_entropy: logits are built one [N-tile x class-chunk] block at a
// time with a BLAS tile GEMM, so [N, s] is never held whole.
//   forward:  parallel over N-tiles; each tile sweeps the chunks with an online log-sum-exp.
//   backward: parallel over class groups (fixed by the shapes); a group owns its rows of grad_W and
//             grad_bias and a partial grad_h, and the partials are added in group order, so the
//             result is the same for any thread count (no atomics).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "sampled/lce_host.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

namespace {

// z [rows, cols] = scale * h[r0:r0+rows] W[c0:c0+cols]^T + bias[c0:c0+cols], in the scratch buffer.
template <typename T>
at::Tensor logits_block(const LceInputs& in, at::Tensor& scratch, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                        T scale) {
  auto z = scratch.narrow(0, 0, rows * cols).view({rows, cols});
  at::mm_out(z, in.h.narrow(0, r0, rows), in.W.narrow(0, c0, cols).t());
  T* zp = z.data_ptr<T>();
  const T* b = in.bias.defined() ? in.bias.data_ptr<T>() + c0 : nullptr;
  for (int64_t i = 0; i < rows; ++i) lce_finish_logits(zp + i * cols, b, scale, cols, 0, 1);
  return z;
}

template <typename T>
void lce_forward_kernel(const LceInputs& in, const LcePlan& plan, const int64_t* target, int64_t ignore_index, T scale,
                        T* loss, T* lse) {
  at::parallel_for(0, plan.num_tiles, 1, [&](int64_t tb, int64_t te) {
    auto scratch = at::empty({kLceTileRows * plan.chunk}, in.h.options());
    std::vector<LseState<T>> state(kLceTileRows);
    std::vector<T> target_logit(kLceTileRows);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r0 = t * kLceTileRows, rows = std::min(kLceTileRows, in.n - r0);
      for (int64_t i = 0; i < rows; ++i) {
        state[i] = {-std::numeric_limits<T>::infinity(), T(0)};
        target_logit[i] = T(0);
      }
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
        const at::Tensor zt = logits_block<T>(in, scratch, r0, rows, c0, cols, scale);
        const T* z = zt.data_ptr<T>();
        for (int64_t i = 0; i < rows; ++i) {
          const LseState<T> part = lse_of_chunk(z + i * cols, cols, 0, 1);
          lse_merge(&state[i], part.max, part.sum);
          const int64_t tc = target[r0 + i] - c0;
          if (target[r0 + i] != ignore_index && tc >= 0 && tc < cols) target_logit[i] = z[i * cols + tc];
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        lse[r0 + i] = lse_value(state[i]);
        loss[r0 + i] = lce_sample_loss(lse[r0 + i], target_logit[i], target[r0 + i] == ignore_index);
      }
    }
  });
}

template <typename T>
void lce_backward_kernel(const LceInputs& in, const LcePlan& plan, const int64_t* target, int64_t ignore_index, T scale,
                         const T* lse, const T* g_loss, const T* g_lse, at::Tensor& grad_h_parts, at::Tensor& grad_W,
                         T* grad_bias) {
  at::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
    auto scratch = at::empty({kLceTileRows * plan.chunk}, in.h.options());
    for (int64_t g = gb; g < ge; ++g) {
      auto grad_h = grad_h_parts[g];
      for (int64_t c = plan.group_begin(g); c < plan.group_begin(g + 1); ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
        const auto Wc = in.W.narrow(0, c0, cols);
        auto grad_Wc = grad_W.narrow(0, c0, cols);
        for (int64_t t = 0; t < plan.num_tiles; ++t) {
          const int64_t r0 = t * kLceTileRows, rows = std::min(kLceTileRows, in.n - r0);
          at::Tensor z = logits_block<T>(in, scratch, r0, rows, c0, cols, scale);
          T* zp = z.data_ptr<T>();
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = r0 + i;
            const int64_t tc = target[r] != ignore_index ? target[r] - c0 : -1;
            lce_dlogits(zp + i * cols, cols, lse[r], g_loss[r], g_lse[r], tc, 0, 1);
          }
          if (grad_bias != nullptr) {
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < cols; ++j) grad_bias[c0 + j] += zp[i * cols + j];
          }
          // d/dW = scale * G^T h, d/dh = scale * G W (G: the d/dz block just computed).
          grad_Wc.addmm_(z.t(), in.h.narrow(0, r0, rows), 1, scale);
          grad_h.narrow(0, r0, rows).addmm_(z, Wc, 1, scale);
        }
      }
    }
  });
}

}  // namespace

static std::tuple<at::Tensor, at::Tensor> linear_cross_entropy_cpu(const at::Tensor& h, const at::Tensor& W,
                                                                   const at::Tensor& target,
                                                                   const std::optional<at::Tensor>& bias, double scale,
                                                                   int64_t ignore_index, c10::string_view reduction,
                                                                   int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  const LceInputs in(h, W, bias);
  const auto tgt = target.contiguous();
  const LcePlan plan(in.n, in.s, chunk_size);
  auto loss = at::empty({in.n}, in.h.options());
  auto lse = at::empty({in.n}, in.h.options());
  AT_DISPATCH_FLOATING_TYPES(in.h.scalar_type(), "linear_cross_entropy_cpu", [&] {
    lce_forward_kernel<scalar_t>(in, plan, tgt.data_ptr<int64_t>(), ignore_index, static_cast<scalar_t>(scale),
                                 loss.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>());
    if (red == 0) return;
    // Sum in sample order in double: the same bits for any thread count.
    const scalar_t* lp = loss.data_ptr<scalar_t>();
    const int64_t* tp = tgt.data_ptr<int64_t>();
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < in.n; ++i) {
      total += lp[i];
      count += tp[i] != ignore_index;
    }
    const double value = red == 1 ? total : (count > 0 ? total / count : 0.0);
    loss = at::full({}, value, in.h.options());
  });
  return {loss, lse};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_cross_entropy_backward_cpu(
    const at::Tensor& h, const at::Tensor& W, const at::Tensor& target, const std::optional<at::Tensor>& bias,
    const at::Tensor& lse, const at::Tensor& grad_loss, const at::Tensor& grad_lse, double scale, int64_t ignore_index,
    int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  check_lce_backward_args(h, lse, grad_loss, grad_lse);
  const LceInputs in(h, W, bias);
  const auto tgt = target.contiguous();
  const LcePlan plan(in.n, in.s, chunk_size);
  auto grad_h_parts = at::zeros({plan.num_groups, in.n, in.d}, in.h.options());
  auto grad_W = at::zeros({in.s, in.d}, in.h.options());
  auto grad_bias = at::zeros({bias.has_value() ? in.s : 0}, in.h.options());
  const auto l = lse.contiguous(), gl = grad_loss.contiguous(), gs = grad_lse.contiguous();
  AT_DISPATCH_FLOATING_TYPES(in.h.scalar_type(), "linear_cross_entropy_backward_cpu", [&] {
    lce_backward_kernel<scalar_t>(in, plan, tgt.data_ptr<int64_t>(), ignore_index, static_cast<scalar_t>(scale),
                                  l.data_ptr<scalar_t>(), gl.data_ptr<scalar_t>(), gs.data_ptr<scalar_t>(),
                                  grad_h_parts, grad_W, bias.has_value() ? grad_bias.data_ptr<scalar_t>() : nullptr);
  });
  // Partial grad_h of the class groups, added in group order.
  auto grad_h = plan.num_groups == 1 ? grad_h_parts[0] : grad_h_parts[0].clone();
  for (int64_t g = 1; g < plan.num_groups; ++g) grad_h.add_(grad_h_parts[g]);
  return lce_grads_in_input_dtypes(grad_h, grad_W, grad_bias, h, W, bias);
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("linear_cross_entropy", &linear_cross_entropy_cpu);
  m.impl("linear_cross_entropy_backward", &linear_cross_entropy_backward_cpu);
}

}  // namespace fedkernels
