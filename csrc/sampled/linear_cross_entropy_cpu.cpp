// CPU launcher of linear_cross_entropy: logits are built one [N-tile x class-chunk] block at a
// time with a BLAS tile GEMM, so [N, s] is never held whole; float rows are finished, exponentiated
// and summed by the row kernels of lce_rows.h at the CPU level (common/cpu_isa.h).
//   forward:  parallel over N-tiles; each tile sweeps the chunks with an online log-sum-exp.
//   backward: parallel over class groups (fixed by the shapes); a group owns its rows of grad_W and
//             grad_bias and a partial grad_h, and the partials are added in group order, so the
//             result is the same for any thread count (no atomics).
//   fused:    forward and gradients in one sweep (the CPU autograd path for a reduced loss): no
//             recomputed logits, see lce_fused_kernel.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/mm.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "sampled/lce_host.h"
#include "sampled/lce_rows.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

namespace {

// Raw products h[r0:r0+rows] W[c0:c0+cols]^T [rows, cols] in the scratch buffer; the row passes
// below finish them (scale, bias) as they read them.
at::Tensor products_block(const LceInputs& in, at::Tensor& scratch, int64_t r0, int64_t rows, int64_t c0,
                          int64_t cols) {
  auto z = scratch.narrow(0, 0, rows * cols).view({rows, cols});
  at::mm_out(z, in.h.narrow(0, r0, rows), in.W.narrow(0, c0, cols).t());
  return z;
}

// One row chunk: finish the logits in place and return their (max, sum exp). float takes the row
// kernels of the CPU level (lce_rows.h); float64 the scalar math (the generic level's for float).
template <typename T>
LseState<T> finish_lse_row(CpuIsa isa, T* z, const T* bias, T scale, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    return lce_rows_finish_lse(isa, z, bias, scale, cols);
  }
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  return lse_of_chunk(z, cols, 0, 1);
}

// One row chunk: finish the logits and turn them into d/dz in place.
template <typename T>
void finish_dlogits_row(CpuIsa isa, T* z, const T* bias, T scale, int64_t cols, T lse, T g_loss, T g_lse,
                        int64_t target_col) {
  if constexpr (std::is_same_v<T, float>) {
    return lce_rows_finish_dlogits(isa, z, bias, scale, cols, lse, g_loss, g_lse, target_col);
  }
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  lce_dlogits(z, cols, lse, g_loss, g_lse, target_col, 0, 1);
}

template <typename T>
void add_row(CpuIsa isa, T* acc, const T* x, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    return lce_rows_add(isa, acc, x, cols);
  }
  for (int64_t j = 0; j < cols; ++j) acc[j] += x[j];
}

template <typename T>
void lce_forward_kernel(const LceInputs& in, const LcePlan& plan, const int64_t* target, int64_t ignore_index, T scale,
                        T* loss, T* lse) {
  const CpuIsa isa = cpu_isa();  // one level for the whole call
  const T* bias = in.bias.defined() ? in.bias.data_ptr<T>() : nullptr;
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
        const at::Tensor zt = products_block(in, scratch, r0, rows, c0, cols);
        T* z = zt.data_ptr<T>();
        for (int64_t i = 0; i < rows; ++i) {
          const LseState<T> part = finish_lse_row<T>(isa, z + i * cols, bias ? bias + c0 : nullptr, scale, cols);
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
  const CpuIsa isa = cpu_isa();  // one level for the whole call
  const T* bias = in.bias.defined() ? in.bias.data_ptr<T>() : nullptr;
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
          at::Tensor z = products_block(in, scratch, r0, rows, c0, cols);
          T* zp = z.data_ptr<T>();
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = r0 + i;
            const int64_t tc = target[r] != ignore_index ? target[r] - c0 : -1;
            finish_dlogits_row<T>(isa, zp + i * cols, bias ? bias + c0 : nullptr, scale, cols, lse[r], g_loss[r],
                                  g_lse[r], tc);
          }
          if (grad_bias != nullptr) {
            for (int64_t i = 0; i < rows; ++i) add_row<T>(isa, grad_bias + c0, zp + i * cols, cols);
          }
          // d/dW = scale * G^T h, d/dh = scale * G W (G: the d/dz block just computed).
          grad_Wc.addmm_(z.t(), in.h.narrow(0, r0, rows), 1, scale);
          grad_h.narrow(0, r0, rows).addmm_(z, Wc, 1, scale);
        }
      }
    }
  });
}

// The loss and its gradients for a unit upstream gradient of the reduced loss, in one sweep over
// tiles of rows. A tile keeps all its logits ([rows, s], as per-chunk blocks) between its log-sum-exp
// pass and its gradient pass, so each logit is computed by one GEMM, not two (the separate backward
// recomputes them). Both passes run over the fixed class groups of the backward kernel; the per-chunk
// (max, sum) partials are merged in chunk order as in lce_forward_kernel, so loss and lse are the
// forward kernel's bits, and a tile's partial grad_h of each group is added in group order: the result
// is the same for any thread count.
template <typename T>
void lce_fused_kernel(const LceInputs& in, const LcePlan& plan, int64_t tile_rows, const int64_t* target,
                      int64_t ignore_index, T scale, T g_live, T* loss, T* lse, T* grad_h, at::Tensor& grad_W,
                      T* grad_bias) {
  const CpuIsa isa = cpu_isa();  // one level for the whole call
  const T* bias = in.bias.defined() ? in.bias.data_ptr<T>() : nullptr;
  const int64_t block = tile_rows * plan.chunk;  // one chunk's block of a tile's logits
  auto logits = at::empty({plan.num_chunks * block}, in.h.options());
  auto parts = at::empty({plan.num_groups, tile_rows, in.d}, in.h.options());
  std::vector<LseState<T>> chunk_lse(tile_rows * plan.num_chunks);
  std::vector<T> target_logit(tile_rows);
  auto block_of = [&](int64_t c, int64_t rows) {
    return logits.narrow(0, c * block, rows * plan.chunk_cols(c, in.s)).view({rows, plan.chunk_cols(c, in.s)});
  };
  for (int64_t r0 = 0; r0 < in.n; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, in.n - r0);
    const auto h_tile = in.h.narrow(0, r0, rows);
    std::fill(target_logit.begin(), target_logit.end(), T(0));
    at::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
      for (int64_t c = plan.group_begin(gb); c < plan.group_begin(ge); ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
        at::Tensor z = block_of(c, rows);
        at::mm_out(z, h_tile, in.W.narrow(0, c0, cols).t());
        T* zp = z.data_ptr<T>();
        for (int64_t i = 0; i < rows; ++i) {
          chunk_lse[i * plan.num_chunks + c] =
              finish_lse_row<T>(isa, zp + i * cols, bias ? bias + c0 : nullptr, scale, cols);
          const int64_t tc = target[r0 + i] - c0;  // one chunk holds the target: one writer
          if (target[r0 + i] != ignore_index && tc >= 0 && tc < cols) target_logit[i] = zp[i * cols + tc];
        }
      }
    });
    for (int64_t i = 0; i < rows; ++i) {
      LseState<T> st{-std::numeric_limits<T>::infinity(), T(0)};
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        lse_merge(&st, chunk_lse[i * plan.num_chunks + c].max, chunk_lse[i * plan.num_chunks + c].sum);
      }
      lse[r0 + i] = lse_value(st);
      loss[r0 + i] = lce_sample_loss(lse[r0 + i], target_logit[i], target[r0 + i] == ignore_index);
    }
    parts.zero_();
    at::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
      for (int64_t g = gb; g < ge; ++g) {
        auto part = parts[g].narrow(0, 0, rows);
        for (int64_t c = plan.group_begin(g); c < plan.group_begin(g + 1); ++c) {
          const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
          at::Tensor z = block_of(c, rows);
          T* zp = z.data_ptr<T>();
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = r0 + i;
            const bool live = target[r] != ignore_index;
            // logits already finished: scale 1 and no bias leave them as they are
            finish_dlogits_row<T>(isa, zp + i * cols, nullptr, T(1), cols, lse[r], live ? g_live : T(0), T(0),
                                  live ? target[r] - c0 : -1);
          }
          if (grad_bias != nullptr) {
            for (int64_t i = 0; i < rows; ++i) add_row<T>(isa, grad_bias + c0, zp + i * cols, cols);
          }
          grad_W.narrow(0, c0, cols).addmm_(z.t(), h_tile, 1, scale);
          part.addmm_(z, in.W.narrow(0, c0, cols), 1, scale);
        }
      }
    });
    const T* pp = parts.data_ptr<T>();
    for (int64_t g = 0; g < plan.num_groups; ++g) {
      for (int64_t k = 0; k < rows * in.d; ++k) grad_h[r0 * in.d + k] += pp[g * tile_rows * in.d + k];
    }
  }
}

// Sum (1), mean over the samples not ignored (2), or the per-sample losses (0), summed in sample
// order in double: the same bits for any thread count.
at::Tensor reduce_lce_loss(const at::Tensor& loss, const at::Tensor& tgt, int64_t ignore_index, int64_t red) {
  if (red == 0) return loss;
  double total = 0;
  int64_t count = 0;
  AT_DISPATCH_FLOATING_TYPES(loss.scalar_type(), "reduce_lce_loss", [&] {
    const scalar_t* lp = loss.data_ptr<scalar_t>();
    const int64_t* tp = tgt.data_ptr<int64_t>();
    for (int64_t i = 0; i < loss.numel(); ++i) {
      total += lp[i];
      count += tp[i] != ignore_index;
    }
  });
  const double value = red == 1 ? total : (count > 0 ? total / count : 0.0);
  return at::full({}, value, loss.options());
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
  });
  loss = reduce_lce_loss(loss, tgt, ignore_index, red);
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

// Loss (reduced: "sum" or "mean"), lse, and grad_h, grad_W, grad_bias of the loss for an upstream
// gradient of 1, in the accumulation dtype (the autograd wrapper scales them by the real one).
static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> linear_cross_entropy_fused_cpu(
    const at::Tensor& h, const at::Tensor& W, const at::Tensor& target, const std::optional<at::Tensor>& bias,
    double scale, int64_t ignore_index, c10::string_view reduction, int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  TORCH_CHECK_VALUE(red != 0, "linear_cross_entropy_fused: reduction must be 'mean' or 'sum', got 'none'");
  const LceInputs in(h, W, bias);
  const auto tgt = target.contiguous();
  const LcePlan plan(in.n, in.s, chunk_size);
  auto loss = at::empty({in.n}, in.h.options());
  auto lse = at::empty({in.n}, in.h.options());
  auto grad_h = at::zeros({in.n, in.d}, in.h.options());
  auto grad_W = at::zeros({in.s, in.d}, in.h.options());
  auto grad_bias = at::zeros({bias.has_value() ? in.s : 0}, in.h.options());
  const int64_t live = tgt.ne(ignore_index).sum().item<int64_t>();
  const double g_live = red == 1 ? 1.0 : (live > 0 ? 1.0 / static_cast<double>(live) : 0.0);
  AT_DISPATCH_FLOATING_TYPES(in.h.scalar_type(), "linear_cross_entropy_fused_cpu", [&] {
    const int64_t tile_rows = std::min(lce_fused_tile_rows(plan, in.s, sizeof(scalar_t)), std::max<int64_t>(in.n, 1));
    lce_fused_kernel<scalar_t>(in, plan, tile_rows, tgt.data_ptr<int64_t>(), ignore_index, static_cast<scalar_t>(scale),
                               static_cast<scalar_t>(g_live), loss.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                               grad_h.data_ptr<scalar_t>(), grad_W,
                               bias.has_value() ? grad_bias.data_ptr<scalar_t>() : nullptr);
  });
  return {reduce_lce_loss(loss, tgt, ignore_index, red), lse, grad_h, grad_W, grad_bias};
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("linear_cross_entropy", &linear_cross_entropy_cpu);
  m.impl("linear_cross_entropy_backward", &linear_cross_entropy_backward_cpu);
  m.impl("linear_cross_entropy_fused", &linear_cross_entropy_fused_cpu);
}

}  // namespace fedkernels
