// CPU launcher of linear_cross_entropy: logits are built one [N-tile x class-chunk] block at a
// time with a BLAS tile GEMM, so [N, s] is never held whole; float rows are finished, exponentiated
// and summed by the row kernels of lce_rows.h at the CPU level (common/cpu_isa.h).
//   forward:  parallel over N-tiles; each tile sweeps the chunks with an online log-sum-exp.
//   backward: parallel over class groups (fixed by the shapes); a group owns its rows of grad_W and
//             grad_bias and a partial grad_h, and the partials are added in group order, so the
//             result is the same for any thread count (no atomics).
//   fused:    forward and gradients in one sweep (the CPU autograd path for a reduced loss): no
//             recomputed logits, see lce_fused_kernel.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/stable/dispatch.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/lce_host.h"
#include "sampled/lce_rows.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

namespace {

// Raw products h[r0:r0+rows] W[c0:c0+cols]^T [rows, cols] in the scratch buffer; the row passes
// below finish them (scale, bias) as they read them.
Tensor products_block(const LceInputs& in, Tensor& scratch, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  Tensor z = host::matrix(scratch, rows, cols);
  host::mm_out(z, host::rows(in.h, r0, rows), host::t(host::rows(in.W, c0, cols)));
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
  const T* bias = in.bias.defined() ? in.bias.const_data_ptr<T>() : nullptr;
  torch::stable::parallel_for(0, plan.num_tiles, 1, [&](int64_t tb, int64_t te) {
    Tensor scratch = empty_on(in.h, {kLceTileRows * plan.chunk});
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
        const Tensor zt = products_block(in, scratch, r0, rows, c0, cols);
        T* z = zt.mutable_data_ptr<T>();
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
                         const T* lse, const T* g_loss, const T* g_lse, Tensor& grad_h_parts, Tensor& grad_W,
                         T* grad_bias) {
  const CpuIsa isa = cpu_isa();  // one level for the whole call
  const T* bias = in.bias.defined() ? in.bias.const_data_ptr<T>() : nullptr;
  torch::stable::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
    Tensor scratch = empty_on(in.h, {kLceTileRows * plan.chunk});
    for (int64_t g = gb; g < ge; ++g) {
      Tensor grad_h = host::slab(grad_h_parts, g);
      for (int64_t c = plan.group_begin(g); c < plan.group_begin(g + 1); ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
        const Tensor Wc = host::rows(in.W, c0, cols);
        Tensor grad_Wc = host::rows(grad_W, c0, cols);
        for (int64_t t = 0; t < plan.num_tiles; ++t) {
          const int64_t r0 = t * kLceTileRows, rows = std::min(kLceTileRows, in.n - r0);
          Tensor z = products_block(in, scratch, r0, rows, c0, cols);
          T* zp = z.mutable_data_ptr<T>();
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
          aten::addmm_(grad_Wc, host::t(z), host::rows(in.h, r0, rows), scale);
          Tensor grad_h_tile = host::rows(grad_h, r0, rows);
          aten::addmm_(grad_h_tile, z, Wc, scale);
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
                      int64_t ignore_index, T scale, T g_live, T* loss, T* lse, T* grad_h, Tensor& grad_W,
                      T* grad_bias) {
  const CpuIsa isa = cpu_isa();  // one level for the whole call
  const T* bias = in.bias.defined() ? in.bias.const_data_ptr<T>() : nullptr;
  const int64_t block = tile_rows * plan.chunk;  // one chunk's block of a tile's logits
  Tensor logits = empty_on(in.h, {plan.num_chunks * block});
  Tensor parts = empty_on(in.h, {plan.num_groups, tile_rows, in.d});
  std::vector<LseState<T>> chunk_lse(tile_rows * plan.num_chunks);
  std::vector<T> target_logit(tile_rows);
  auto block_of = [&](int64_t c, int64_t rows) {
    const int64_t cols = plan.chunk_cols(c, in.s);
    return host::view_as(logits, {rows, cols}, {cols, 1}, c * block);
  };
  for (int64_t r0 = 0; r0 < in.n; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, in.n - r0);
    const Tensor h_tile = host::rows(in.h, r0, rows);
    std::fill(target_logit.begin(), target_logit.end(), T(0));
    torch::stable::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
      for (int64_t c = plan.group_begin(gb); c < plan.group_begin(ge); ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
        Tensor z = block_of(c, rows);
        host::mm_out(z, h_tile, host::t(host::rows(in.W, c0, cols)));
        T* zp = z.mutable_data_ptr<T>();
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
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_zero_(parts.get()));
    torch::stable::parallel_for(0, plan.num_groups, 1, [&](int64_t gb, int64_t ge) {
      for (int64_t g = gb; g < ge; ++g) {
        Tensor part = host::rows(host::slab(parts, g), 0, rows);
        for (int64_t c = plan.group_begin(g); c < plan.group_begin(g + 1); ++c) {
          const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, in.s);
          Tensor z = block_of(c, rows);
          T* zp = z.mutable_data_ptr<T>();
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
          Tensor grad_Wc = host::rows(grad_W, c0, cols);
          aten::addmm_(grad_Wc, host::t(z), h_tile, scale);
          aten::addmm_(part, z, host::rows(in.W, c0, cols), scale);
        }
      }
    });
    const T* pp = parts.const_data_ptr<T>();
    for (int64_t g = 0; g < plan.num_groups; ++g) {
      for (int64_t k = 0; k < rows * in.d; ++k) grad_h[r0 * in.d + k] += pp[g * tile_rows * in.d + k];
    }
  }
}

// Sum (1), mean over the samples not ignored (2), or the per-sample losses (0), summed in sample
// order in double: the same bits for any thread count.
Tensor reduce_lce_loss(const Tensor& loss, const Tensor& tgt, int64_t ignore_index, int64_t red) {
  if (red == 0) return loss;
  double total = 0;
  int64_t count = 0;
  FK_DISPATCH_FLOATING(loss.scalar_type(), "reduce_lce_loss", [&] {
    const scalar_t* lp = loss.const_data_ptr<scalar_t>();
    const int64_t* tp = tgt.const_data_ptr<int64_t>();
    const int64_t n = loss.numel();
    for (int64_t i = 0; i < n; ++i) {
      total += lp[i];
      count += tp[i] != ignore_index;
    }
  });
  const double value = red == 1 ? total : (count > 0 ? total / count : 0.0);
  return torch::stable::full({}, value, loss.scalar_type(), std::nullopt, loss.device());
}

// Elements per task of the group-order sum of the partial grad_h (ATen's internal GRAIN_SIZE, what
// Tensor.add_ split by).
constexpr int64_t kAddGrain = 32768;

}  // namespace

static std::tuple<Tensor, Tensor> linear_cross_entropy_cpu(const Tensor& h, const Tensor& W, const Tensor& target,
                                                           const std::optional<Tensor>& bias, double scale,
                                                           int64_t ignore_index, std::string_view reduction,
                                                           int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  const LceInputs in(h, W, bias);
  const Tensor tgt = contiguous_or_self(target);
  const LcePlan plan(in.n, in.s, chunk_size);
  Tensor loss = empty_on(in.h, {in.n});
  Tensor lse = empty_on(in.h, {in.n});
  FK_DISPATCH_FLOATING(in.h.scalar_type(), "linear_cross_entropy_cpu", [&] {
    lce_forward_kernel<scalar_t>(in, plan, tgt.const_data_ptr<int64_t>(), ignore_index, static_cast<scalar_t>(scale),
                                 loss.mutable_data_ptr<scalar_t>(), lse.mutable_data_ptr<scalar_t>());
  });
  loss = reduce_lce_loss(loss, tgt, ignore_index, red);
  return {loss, lse};
}

static std::tuple<Tensor, Tensor, Tensor> linear_cross_entropy_backward_cpu(
    const Tensor& h, const Tensor& W, const Tensor& target, const std::optional<Tensor>& bias, const Tensor& lse,
    const Tensor& grad_loss, const Tensor& grad_lse, double scale, int64_t ignore_index, int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  check_lce_backward_args(h, lse, grad_loss, grad_lse);
  const LceInputs in(h, W, bias);
  const Tensor tgt = contiguous_or_self(target);
  const LcePlan plan(in.n, in.s, chunk_size);
  Tensor grad_h_parts = zeros_on(in.h, {plan.num_groups, in.n, in.d});
  Tensor grad_W = zeros_on(in.h, {in.s, in.d});
  Tensor grad_bias = zeros_on(in.h, {bias.has_value() ? in.s : 0});
  const Tensor l = contiguous_or_self(lse), gl = contiguous_or_self(grad_loss), gs = contiguous_or_self(grad_lse);
  Tensor grad_h;
  FK_DISPATCH_FLOATING(in.h.scalar_type(), "linear_cross_entropy_backward_cpu", [&] {
    lce_backward_kernel<scalar_t>(in, plan, tgt.const_data_ptr<int64_t>(), ignore_index, static_cast<scalar_t>(scale),
                                  l.const_data_ptr<scalar_t>(), gl.const_data_ptr<scalar_t>(),
                                  gs.const_data_ptr<scalar_t>(), grad_h_parts, grad_W,
                                  bias.has_value() ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr);
    // Partial grad_h of the class groups, added in group order (elementwise: the same bits as
    // Tensor.add_, for any thread count).
    grad_h = host::slab(grad_h_parts, 0);
    if (plan.num_groups > 1) {
      grad_h = torch::stable::clone(grad_h);
      scalar_t* acc = grad_h.mutable_data_ptr<scalar_t>();
      const scalar_t* parts = grad_h_parts.const_data_ptr<scalar_t>();
      const int64_t size = in.n * in.d;
      torch::stable::parallel_for(0, size, kAddGrain, [&](int64_t b, int64_t e) {
        for (int64_t g = 1; g < plan.num_groups; ++g) {
          const scalar_t* part = parts + g * size;
          for (int64_t k = b; k < e; ++k) acc[k] += part[k];
        }
      });
    }
  });
  return lce_grads_in_input_dtypes(grad_h, grad_W, grad_bias, h, W, bias);
}

// Loss (reduced: "sum" or "mean"), lse, and grad_h, grad_W, grad_bias of the loss for an upstream
// gradient of 1, in the accumulation dtype (the autograd wrapper scales them by the real one).
static std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> linear_cross_entropy_fused_cpu(
    const Tensor& h, const Tensor& W, const Tensor& target, const std::optional<Tensor>& bias, double scale,
    int64_t ignore_index, std::string_view reduction, int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  FK_CHECK_VALUE(red != 0, "linear_cross_entropy_fused: reduction must be 'mean' or 'sum', got 'none'");
  const LceInputs in(h, W, bias);
  const Tensor tgt = contiguous_or_self(target);
  const LcePlan plan(in.n, in.s, chunk_size);
  Tensor loss = empty_on(in.h, {in.n});
  Tensor lse = empty_on(in.h, {in.n});
  Tensor grad_h = zeros_on(in.h, {in.n, in.d});
  Tensor grad_W = zeros_on(in.h, {in.s, in.d});
  Tensor grad_bias = zeros_on(in.h, {bias.has_value() ? in.s : 0});
  int64_t live = 0;  // the samples not ignored (a host tensor: counted directly)
  const int64_t* tp = tgt.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < in.n; ++i) live += tp[i] != ignore_index;
  const double g_live = red == 1 ? 1.0 : (live > 0 ? 1.0 / static_cast<double>(live) : 0.0);
  FK_DISPATCH_FLOATING(in.h.scalar_type(), "linear_cross_entropy_fused_cpu", [&] {
    const int64_t tile_rows = std::min(lce_fused_tile_rows(plan, in.s, sizeof(scalar_t)), std::max<int64_t>(in.n, 1));
    lce_fused_kernel<scalar_t>(in, plan, tile_rows, tgt.const_data_ptr<int64_t>(), ignore_index,
                               static_cast<scalar_t>(scale), static_cast<scalar_t>(g_live),
                               loss.mutable_data_ptr<scalar_t>(), lse.mutable_data_ptr<scalar_t>(),
                               grad_h.mutable_data_ptr<scalar_t>(), grad_W,
                               bias.has_value() ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr);
  });
  return {reduce_lce_loss(loss, tgt, ignore_index, red), lse, grad_h, grad_W, grad_bias};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("linear_cross_entropy", TORCH_BOX(&linear_cross_entropy_cpu));
  m.impl("linear_cross_entropy_backward", TORCH_BOX(&linear_cross_entropy_backward_cpu));
  m.impl("linear_cross_entropy_fused", TORCH_BOX(&linear_cross_entropy_fused_cpu));
}

}  // namespace fedkernels
