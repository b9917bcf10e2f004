// Argument checks of linear_topk, shared by the CPU and CUDA launchers (host only).
#pragma once

#include <cmath>
#include <optional>

#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/tensor.h"
#include "topk/topk.h"

namespace fedkernels {

// h [N, d] and W [p, d] float32 or bfloat16 (the same dtype), bias [p] float32 or W's dtype or absent,
// 0 <= k <= p, p < 2^31, finite scale; one device. Any strides are accepted (the launchers read W
// through its strides, or copy what they must).
inline void check_linear_topk_args(const Tensor& h, const Tensor& W, const std::optional<Tensor>& bias, int64_t k,
                                   double scale) {
  const ScalarType dt = h.scalar_type();
  FK_CHECK_VALUE(dt == ScalarType::Float || dt == ScalarType::BFloat16, "h must be float32 or bfloat16, got ", dt);
  check_dim(h, 2, "h");
  check_dim(W, 2, "W");
  FK_CHECK_VALUE(W.scalar_type() == dt, "W must have the dtype of h (", dt, "), got ", W.scalar_type());
  FK_CHECK_VALUE(W.size(1) == h.size(1), "W must have shape [p, d] with d = h.size(1) = ", h.size(1), ", got ",
                 shape_text(W.sizes()));
  check_same_device(h, "h", W, "W");
  const int64_t p = W.size(0);
  FK_CHECK_VALUE(p <= topk::kMaxClasses, "W has ", p, " rows (classes); at most 2^31 - 1 are supported");
  if (bias.has_value()) {
    const ScalarType bt = bias->scalar_type();
    FK_CHECK_VALUE(bt == ScalarType::Float || bt == dt, "bias must be float32 or the dtype of W (", dt, "), got ", bt);
    FK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == p, "bias must have shape [p] = [", p, "], got ",
                   shape_text(bias->sizes()));
    check_same_device(h, "h", *bias, "bias");
  }
  FK_CHECK_VALUE(k >= 0, "k must be >= 0, got ", k);
  FK_CHECK_VALUE(k <= p, "k must be <= p (the number of classes, W.size(0) = ", p, "), got k = ", k);
  FK_CHECK_VALUE(std::isfinite(static_cast<float>(scale)), "scale must be finite in float32, got ", scale);
}

}  // namespace fedkernels
