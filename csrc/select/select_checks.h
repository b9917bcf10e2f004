// Argument checks of the partial-weight-exchange ops, shared by the CPU and CUDA launchers.
// Everything here runs on the host before any tensor memory is touched.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/alloc.h"
#include "common/stable/tensor.h"
#include "select/select.h"

namespace fedkernels {

inline ElemType elem_type_of(const Tensor& t, const char* list, size_t i) {
  switch (t.scalar_type()) {
    case ScalarType::Float:
      return ElemType::kFloat32;
    case ScalarType::Half:
      return ElemType::kFloat16;
    case ScalarType::BFloat16:
      return ElemType::kBFloat16;
    case ScalarType::Double:
      return ElemType::kFloat64;
    default:
      FK_CHECK_VALUE(false, list, "[", i, "] must be float32, float16, bfloat16 or float64, got ", t.scalar_type());
  }
  return ElemType::kFloat32;
}

// Two tensors of one shape (ATen's sizes() ==).
inline bool same_sizes(const Tensor& a, const Tensor& b) {
  const IntArrayRef as = a.sizes(), bs = b.sizes();
  return std::equal(as.begin(), as.end(), bs.begin(), bs.end());
}

// new[i] and old[i]: defined, floating, same dtype and shape; every tensor on one device.
inline void check_tensor_pairs(const std::vector<Tensor>& new_, const std::vector<Tensor>& old) {
  FK_CHECK_VALUE(new_.size() == old.size(), "new and old must have the same length, got ", new_.size(), " and ",
                 old.size());
  for (size_t i = 0; i < new_.size(); ++i) {
    FK_CHECK_VALUE(new_[i].defined() && old[i].defined(), "new[", i, "] and old[", i, "] must be defined tensors");
    FK_CHECK_VALUE(same_device(new_[i], new_[0]) && same_device(old[i], new_[0]), "new[", i, "] and old[", i,
                   "] must be on the device of new[0] (", device_text(new_[0]), "), got ", device_text(new_[i]),
                   " and ", device_text(old[i]));
    elem_type_of(new_[i], "new", i);
    FK_CHECK_VALUE(old[i].scalar_type() == new_[i].scalar_type(), "old[", i, "] must have the dtype of new[", i, "] (",
                   new_[i].scalar_type(), "), got ", old[i].scalar_type());
    FK_CHECK_VALUE(same_sizes(old[i], new_[i]), "old[", i, "] must have the shape of new[", i, "] ",
                   shape_text(new_[i].sizes()), ", got ", shape_text(old[i].sizes()));
  }
}

inline void check_fraction(double fraction) {
  FK_CHECK_VALUE(fraction > 0.0 && fraction <= 1.0, "fraction must lie in (0, 1], got ", fraction);
}

// Host metadata of masked_weighted_average: 1-D CPU tensors of the right dtype and length.
inline void check_masked_metadata(const std::vector<Tensor>& dst, const std::vector<Tensor>& sent,
                                  const Tensor& client_of, const Tensor& tensor_of, const Tensor& weights) {
  const struct {
    const Tensor& t;
    const char* name;
    ScalarType dtype;
  } meta[] = {{client_of, "client_of", ScalarType::Long},
              {tensor_of, "tensor_of (the clients' idx)", ScalarType::Long},
              {weights, "weights", ScalarType::Double}};
  for (const auto& m : meta) {
    check_dtype(m.t, m.dtype, m.name);
    check_dim(m.t, 1, m.name);
    FK_CHECK_VALUE(m.t.is_cpu(), m.name, " must be a CPU tensor (host metadata), got ", device_text(m.t));
  }
  const int64_t s = static_cast<int64_t>(sent.size());
  FK_CHECK_VALUE(client_of.numel() == s && tensor_of.numel() == s,
                 "client_of and tensor_of (idx) must have one "
                 "entry per sent tensor (",
                 s, "), got ", client_of.numel(), " and ", tensor_of.numel());
  // Host tensors (checked above): a loop, not a reduction.
  check_index_range(client_of, 0, weights.numel(), "client_of");
  check_index_range(tensor_of, 0, static_cast<int64_t>(dst.size()), "tensor_of (the clients' idx)");
  const Tensor w = contiguous_or_self(weights);
  const double* wp = w.const_data_ptr<double>();
  const int64_t n = w.numel();
  for (int64_t c = 0; c < n; ++c) {
    FK_CHECK_VALUE(std::isfinite(wp[c]) && wp[c] >= 0.0, "weights must be finite and >= 0, got weights[", c,
                   "] = ", wp[c]);
  }
}

// A sent tensor matches the tensor it replaces: same device, dtype and shape.
inline void check_sent_matches(const Tensor& x, int64_t s, int64_t client, const Tensor& d, int64_t t) {
  FK_CHECK_VALUE(x.defined(), "sent tensor ", s, " (client ", client, ") is undefined");
  FK_CHECK_VALUE(same_device(x, d), "sent tensor ", s, " (client ", client, ", idx ", t,
                 ") must be on the device of dst[", t, "] (", device_text(d), "), got ", device_text(x));
  FK_CHECK_VALUE(x.scalar_type() == d.scalar_type(), "sent tensor ", s, " (client ", client, ", idx ", t,
                 ") must have the dtype of dst[", t, "] (", d.scalar_type(), "), got ", x.scalar_type());
  FK_CHECK_VALUE(same_sizes(x, d), "sent tensor ", s, " (client ", client, ", idx ", t, ") must have the shape of dst[",
                 t, "] ", shape_text(d.sizes()), ", got ", shape_text(x.sizes()));
}

}  // namespace fedkernels
