// Argument checks and shape bookkeeping of the prox family, shared by the CPU and CUDA launchers.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"
#include "prox/prox.h"

namespace fedkernels {

inline TvLayout tv_layout(const Tensor& z, int64_t block_size) {
  TvLayout l;
  l.d = z.size(-1);
  l.rows = l.d == 0 ? 0 : z.numel() / l.d;  // a zero-length row has no items to solve
  l.block = (block_size > 0 && block_size < l.d) ? block_size : l.d;
  l.nblocks = l.block == 0 ? 0 : (l.d + l.block - 1) / l.block;
  return l;
}

inline void check_lam_value(double v) {
  FK_CHECK_VALUE(std::isfinite(v), "lam must be finite, got ", v);
  FK_CHECK_VALUE(v >= 0.0, "lam must be >= 0, got min ", v);
}

inline bool is_float_or_double(ScalarType s) { return s == ScalarType::Float || s == ScalarType::Double; }

// z: float32/float64 [..., d]; lam: float tensor broadcastable to z.shape[:-1], finite, >= 0.
// Returns lam expanded to one float64 value per row, on lam's device.
inline Tensor check_prox_tv1d_args(const Tensor& z, const Tensor& lam, int64_t block_size) {
  FK_CHECK_VALUE(is_float_or_double(z.scalar_type()), "z must be float32 or float64, got ", z.scalar_type());
  FK_CHECK_VALUE(z.dim() >= 1, "z must have at least one dimension [..., d], got a 0-D tensor");
  FK_CHECK_VALUE(is_float_or_double(lam.scalar_type()), "lam must be a float32 or float64 tensor, got ",
                 lam.scalar_type());
  FK_CHECK_VALUE(same_device(z, lam), "z and lam must be on the same device, got ", device_text(z), " and ",
                 device_text(lam));
  FK_CHECK_VALUE(block_size >= 0, "block_size must be >= 0 (0 = whole rows), got ", block_size);
  const std::vector<int64_t> batch = leading_sizes(z, z.dim() - 1);
  FK_CHECK_VALUE(is_expandable_to(lam.sizes(), batch), "lam of shape ", shape_text(lam.sizes()),
                 " must broadcast to the batch shape z.shape[:-1] = ", shape_text(batch));
  if (lam.is_cpu() && lam.numel() == 1) {
    // One lam for every row on the host (the common call): read it directly; the tensor ops of the
    // general path below cost about as long as the solve of a 1000-entry row.
    const double v = lam.scalar_type() == ScalarType::Double ? *lam.const_data_ptr<double>()
                                                             : static_cast<double>(*lam.const_data_ptr<float>());
    check_lam_value(v);
    return full_cpu(product(batch), v);
  }
  const Tensor lam64 = to_dtype(lam, ScalarType::Double);
  if (lam64.is_cpu()) {  // a plain loop: no reductions on the hot path of small calls
    const Tensor lc = contiguous_or_self(lam64);
    const double* p = lc.const_data_ptr<double>();
    const int64_t n = lc.numel();
    for (int64_t i = 0; i < n; ++i) check_lam_value(p[i]);
  } else if (lam64.numel() > 0) {
    FK_CHECK_VALUE(item_bool(all(isfinite(lam64))), "lam must be finite, got a NaN or inf");
    const double mn = item_double(min(lam64));
    FK_CHECK_VALUE(mn >= 0.0, "lam must be >= 0, got min ", mn);
  }
  return torch::stable::reshape(contiguous_or_self(expand(lam64, batch)), {-1});
}

// Raised after a forward solve when a row reported NaN/inf.
inline void check_rows_finite(bool any_bad) {
  FK_CHECK_VALUE(!any_bad, "z must be finite: it holds NaN or inf (or a row sum overflows float64)");
}

// The backward's arguments: those of the forward (with u in place of z) plus grad like u.
// Returns lam expanded to one float64 value per row.
inline Tensor check_prox_tv1d_backward_args(const Tensor& grad, const Tensor& u, const Tensor& lam,
                                            int64_t block_size) {
  const Tensor lam_rows = check_prox_tv1d_args(u, lam, block_size);
  const IntArrayRef gs = grad.sizes(), us = u.sizes();
  FK_CHECK_VALUE(std::equal(gs.begin(), gs.end(), us.begin(), us.end()), "grad must have the shape of u ",
                 shape_text(us), ", got ", shape_text(gs));
  FK_CHECK_VALUE(grad.scalar_type() == u.scalar_type(), "grad must have the dtype of u (", u.scalar_type(), "), got ",
                 grad.scalar_type());
  FK_CHECK_VALUE(same_device(grad, u), "grad and u must be on the same device, got ", device_text(grad), " and ",
                 device_text(u));
  return lam_rows;
}

// d loss / d lam in lam's shape and dtype from the per-item gradients [items] (float64, any device):
// the items of a row add up in block order, then rows into lam's elements in row order, on the
// host (deterministic, no float atomics). Row r's lam element is r's batch index with lam's
// broadcast dimensions (size 1, or missing on the left) read as 0.
inline Tensor reduce_lam_grad(const Tensor& per_item, const TvLayout& l, const Tensor& lam, IntArrayRef batch) {
  Tensor acc = full_cpu(lam.numel(), 0.0);
  const Tensor items = contiguous_or_self(to_cpu(per_item, ScalarType::Double));
  const double* src = items.const_data_ptr<double>();
  double* dst = acc.mutable_data_ptr<double>();
  const IntArrayRef ls = lam.sizes();
  const size_t nb = batch.size(), nl = ls.size();
  std::vector<int64_t> lam_stride(nl, 1);  // contiguous strides of lam's shape
  for (size_t k = nl; k-- > 1;) lam_stride[k - 1] = lam_stride[k] * ls[k];
  for (int64_t r = 0; r < l.rows; ++r) {
    double row = 0.0;
    for (int64_t b = 0; b < l.nblocks; ++b) row += src[r * l.nblocks + b];
    int64_t rest = r, owner = 0;
    for (size_t k = nb; k-- > 0;) {  // batch dimension k, from the last
      const int64_t i = rest % batch[k];
      rest /= batch[k];
      const size_t back = nb - 1 - k;
      if (back < nl && ls[nl - 1 - back] != 1) owner += i * lam_stride[nl - 1 - back];
    }
    dst[owner] += row;
  }
  Tensor out = torch::stable::view(acc, ls);
  if (!lam.is_cpu()) out = torch::stable::to(out, lam.device());
  return out.scalar_type() == lam.scalar_type() ? out : torch::stable::to(out, lam.scalar_type());
}

}  // namespace fedkernels
