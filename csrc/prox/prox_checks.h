// Argument checks and shape bookkeeping of the prox family, shared by the CPU and CUDA launchers.
#pragma once

#include <ATen/ExpandUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

#include "common/checks.h"
#include "prox/prox.h"

namespace fedkernels {

inline TvLayout tv_layout(const at::Tensor& z, int64_t block_size) {
  TvLayout l;
  l.d = z.size(-1);
  l.rows = l.d == 0 ? 0 : z.numel() / l.d;  // a zero-length row has no items to solve
  l.block = (block_size > 0 && block_size < l.d) ? block_size : l.d;
  l.nblocks = l.block == 0 ? 0 : (l.d + l.block - 1) / l.block;
  return l;
}

inline void check_lam_value(double v) {
  TORCH_CHECK_VALUE(std::isfinite(v), "lam must be finite, got ", v);
  TORCH_CHECK_VALUE(v >= 0.0, "lam must be >= 0, got min ", v);
}

// z: float32/float64 [..., d]; lam: float tensor broadcastable to z.shape[:-1], finite, >= 0.
// Returns lam expanded to one float64 value per row.
inline at::Tensor check_prox_tv1d_args(const at::Tensor& z, const at::Tensor& lam, int64_t block_size) {
  TORCH_CHECK_VALUE(z.scalar_type() == at::kFloat || z.scalar_type() == at::kDouble,
                    "z must be float32 or float64, got ", z.scalar_type());
  TORCH_CHECK_VALUE(z.dim() >= 1, "z must have at least one dimension [..., d], got a 0-D tensor");
  TORCH_CHECK_VALUE(lam.scalar_type() == at::kFloat || lam.scalar_type() == at::kDouble,
                    "lam must be a float32 or float64 tensor, got ", lam.scalar_type());
  check_same_device(z, "z", lam, "lam");
  TORCH_CHECK_VALUE(block_size >= 0, "block_size must be >= 0 (0 = whole rows), got ", block_size);
  const auto batch = z.sizes().slice(0, z.dim() - 1);
  TORCH_CHECK_VALUE(at::is_expandable_to(lam.sizes(), batch), "lam of shape ", lam.sizes(),
                    " must broadcast to the batch shape z.shape[:-1] = ", batch);
  if (lam.is_cpu() && lam.numel() == 1) {
    // One lam for every row on the host (the common call): read it directly; the tensor ops of the
    // general path below cost about as long as the solve of a 1000-entry row.
    const double v = lam.scalar_type() == at::kDouble ? *lam.const_data_ptr<double>()
                                                      : static_cast<double>(*lam.const_data_ptr<float>());
    check_lam_value(v);
    return at::full({c10::multiply_integers(batch)}, v, at::TensorOptions().dtype(at::kDouble));
  }
  const auto lam64 = lam.to(at::kDouble);
  if (lam64.is_cpu()) {  // a plain loop: no reductions on the hot path of small calls
    const auto lc = lam64.contiguous();
    const double* p = lc.data_ptr<double>();
    for (int64_t i = 0; i < lc.numel(); ++i) check_lam_value(p[i]);
  } else if (lam64.numel() > 0) {
    TORCH_CHECK_VALUE(at::isfinite(lam64).all().item<bool>(), "lam must be finite, got a NaN or inf");
    const double mn = lam64.min().item<double>();
    TORCH_CHECK_VALUE(mn >= 0.0, "lam must be >= 0, got min ", mn);
  }
  return lam64.expand(batch).contiguous().reshape({-1});
}

// Raised after a forward solve when a row reported NaN/inf.
inline void check_rows_finite(bool any_bad) {
  TORCH_CHECK_VALUE(!any_bad, "z must be finite: it holds NaN or inf (or a row sum overflows float64)");
}

// The backward's arguments: those of the forward (with u in place of z) plus grad like u.
// Returns lam expanded to one float64 value per row.
inline at::Tensor check_prox_tv1d_backward_args(const at::Tensor& grad, const at::Tensor& u, const at::Tensor& lam,
                                                int64_t block_size) {
  const at::Tensor lam_rows = check_prox_tv1d_args(u, lam, block_size);
  TORCH_CHECK_VALUE(grad.sizes() == u.sizes(), "grad must have the shape of u ", u.sizes(), ", got ", grad.sizes());
  TORCH_CHECK_VALUE(grad.scalar_type() == u.scalar_type(), "grad must have the dtype of u (", u.scalar_type(),
                    "), got ", grad.scalar_type());
  check_same_device(grad, "grad", u, "u");
  return lam_rows;
}

// d loss / d lam in lam's shape and dtype from the per-item gradients [items] (float64, any device):
// the items of a row add up in block order, then rows into lam's elements in row order, on the
// host (deterministic, no float atomics).
inline at::Tensor reduce_lam_grad(const at::Tensor& per_item, const TvLayout& l, const at::Tensor& lam,
                                  at::IntArrayRef batch) {
  const auto owner = at::arange(lam.numel(), at::kLong).view(lam.sizes()).expand(batch).contiguous().view({-1});
  auto acc = at::zeros({lam.numel()}, at::kDouble);
  const auto items = per_item.to(at::kCPU, at::kDouble).contiguous();
  const double* src = items.data_ptr<double>();
  const int64_t* own = owner.data_ptr<int64_t>();
  double* dst = acc.data_ptr<double>();
  for (int64_t r = 0; r < l.rows; ++r) {
    double row = 0.0;
    for (int64_t b = 0; b < l.nblocks; ++b) row += src[r * l.nblocks + b];
    dst[own[r]] += row;
  }
  return acc.view(lam.sizes()).to(lam.device(), lam.scalar_type());
}

}  // namespace fedkernels
