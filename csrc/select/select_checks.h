// Argument checks of the partial-weight-exchange ops, shared by the CPU and CUDA launchers.
// Everything here runs on the host before any tensor memory is touched.
#pragma once

#include <cmath>
#include <vector>

#include "common/checks.h"
#include "select/select.h"

namespace fedkernels {

inline ElemType elem_type_of(const at::Tensor& t, const char* list, size_t i) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ElemType::kFloat32;
    case at::kHalf:
      return ElemType::kFloat16;
    case at::kBFloat16:
      return ElemType::kBFloat16;
    case at::kDouble:
      return ElemType::kFloat64;
    default:
      TORCH_CHECK_VALUE(false, list, "[", i, "] must be float32, float16, bfloat16 or float64, got ", t.scalar_type());
  }
  return ElemType::kFloat32;
}

// new[i] and old[i]: defined, floating, same dtype and shape; every tensor on one device.
inline void check_tensor_pairs(at::TensorList new_, at::TensorList old) {
  TORCH_CHECK_VALUE(new_.size() == old.size(), "new and old must have the same length, got ", new_.size(), " and ",
                    old.size());
  for (size_t i = 0; i < new_.size(); ++i) {
    TORCH_CHECK_VALUE(new_[i].defined() && old[i].defined(), "new[", i, "] and old[", i, "] must be defined tensors");
    TORCH_CHECK_VALUE(new_[i].device() == new_[0].device() && old[i].device() == new_[0].device(), "new[", i,
                      "] and old[", i, "] must be on the device of new[0] (", new_[0].device(), "), got ",
                      new_[i].device(), " and ", old[i].device());
    elem_type_of(new_[i], "new", i);
    TORCH_CHECK_VALUE(old[i].scalar_type() == new_[i].scalar_type(), "old[", i, "] must have the dtype of new[", i,
                      "] (", new_[i].scalar_type(), "), got ", old[i].scalar_type());
    TORCH_CHECK_VALUE(old[i].sizes() == new_[i].sizes(), "old[", i, "] must have the shape of new[", i, "] ",
                      new_[i].sizes(), ", got ", old[i].sizes());
  }
}

inline void check_fraction(double fraction) {
  TORCH_CHECK_VALUE(fraction > 0.0 && fraction <= 1.0, "fraction must lie in (0, 1], got ", fraction);
}

// Host metadata of masked_weighted_average: 1-D CPU tensors of the right dtype and length.
inline void check_masked_metadata(at::TensorList dst, at::TensorList sent, const at::Tensor& client_of,
                                  const at::Tensor& tensor_of, const at::Tensor& weights) {
  const struct {
    const at::Tensor& t;
    const char* name;
    at::ScalarType dtype;
  } meta[] = {{client_of, "client_of", at::kLong},
              {tensor_of, "tensor_of (the clients' idx)", at::kLong},
              {weights, "weights", at::kDouble}};
  for (const auto& m : meta) {
    check_dtype(m.t, m.dtype, m.name);
    check_dim(m.t, 1, m.name);
    TORCH_CHECK_VALUE(m.t.device().is_cpu(), m.name, " must be a CPU tensor (host metadata), got ", m.t.device());
  }
  const int64_t s = static_cast<int64_t>(sent.size());
  TORCH_CHECK_VALUE(client_of.numel() == s && tensor_of.numel() == s,
                    "client_of and tensor_of (idx) must have one "
                    "entry per sent tensor (",
                    s, "), got ", client_of.numel(), " and ", tensor_of.numel());
  check_index_range(client_of, 0, weights.numel(), "client_of");
  check_index_range(tensor_of, 0, static_cast<int64_t>(dst.size()), "tensor_of (the clients' idx)");
  const auto w = weights.contiguous();
  const double* wp = w.data_ptr<double>();
  for (int64_t c = 0; c < w.numel(); ++c) {
    TORCH_CHECK_VALUE(std::isfinite(wp[c]) && wp[c] >= 0.0, "weights must be finite and >= 0, got weights[", c,
                      "] = ", wp[c]);
  }
}

// A sent tensor matches the tensor it replaces: same device, dtype and shape.
inline void check_sent_matches(const at::Tensor& x, int64_t s, int64_t client, const at::Tensor& d, int64_t t) {
  TORCH_CHECK_VALUE(x.defined(), "sent tensor ", s, " (client ", client, ") is undefined");
  TORCH_CHECK_VALUE(x.device() == d.device(), "sent tensor ", s, " (client ", client, ", idx ", t,
                    ") must be on the device of dst[", t, "] (", d.device(), "), got ", x.device());
  TORCH_CHECK_VALUE(x.scalar_type() == d.scalar_type(), "sent tensor ", s, " (client ", client, ", idx ", t,
                    ") must have the dtype of dst[", t, "] (", d.scalar_type(), "), got ", x.scalar_type());
  TORCH_CHECK_VALUE(x.sizes() == d.sizes(), "sent tensor ", s, " (client ", client, ", idx ", t,
                    ") must have the shape of dst[", t, "] ", d.sizes(), ", got ", x.sizes());
}

}  // namespace fedkernels
