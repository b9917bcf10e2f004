// New tensors and contiguous forms without a dispatcher call: torch::stable's new_empty, new_zeros and
// contiguous go through the dispatcher by schema name on every call (a lookup and a boxed call each),
// which a small call feels as much as its kernel. These make the same tensors through the C shim's
// direct functions, and return an already contiguous tensor itself (as ATen's contiguous() does).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/stable/tensor.h"

namespace fedkernels {

// t itself when it is contiguous (as Tensor.contiguous() returns it), else a contiguous copy.
inline Tensor contiguous_or_self(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

// The row-major strides of `sizes` (a size-0 dimension counts as 1, as torch's contiguous strides do).
inline std::vector<int64_t> contiguous_strides(IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;) strides[k - 1] = strides[k] * std::max<int64_t>(sizes[k], 1);
  return strides;
}

// A new uninitialised contiguous tensor of `sizes` and `dtype` on `like`'s device: like.new_empty(sizes, dtype).
inline Tensor empty_on(const Tensor& like, IntArrayRef sizes, ScalarType dtype) {
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  const int32_t shim_dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  int32_t device_type = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(),
                                                         strides.data(), shim_dtype, device_type,
                                                         like.get_device_index(), &out));
  return Tensor(out);
}
// like.new_empty(sizes): like's dtype.
inline Tensor empty_on(const Tensor& like, IntArrayRef sizes) { return empty_on(like, sizes, like.scalar_type()); }

// like.new_zeros(sizes, dtype) / like.new_zeros(sizes).
inline Tensor zeros_on(const Tensor& like, IntArrayRef sizes, ScalarType dtype) {
  Tensor t = empty_on(like, sizes, dtype);
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_zero_(t.get()));
  return t;
}
inline Tensor zeros_on(const Tensor& like, IntArrayRef sizes) { return zeros_on(like, sizes, like.scalar_type()); }

// An uninitialised 1-D host tensor of n elements (torch.empty(n, dtype=dtype)).
inline Tensor empty_cpu(int64_t n, ScalarType dtype) {
  const int64_t stride = 1;
  const int32_t shim_dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  AtenTensorHandle handle = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(1, &n, &stride, shim_dtype, aoti_torch_device_type_cpu(), 0, &handle));
  return Tensor(handle);
}

// A 1-D float64 host tensor of n copies of `value` (torch.full((n,), value, dtype=torch.float64)).
inline Tensor full_cpu(int64_t n, double value) {
  Tensor t = empty_cpu(n, ScalarType::Double);
  std::fill_n(t.mutable_data_ptr<double>(), n, value);
  return t;
}

}  // namespace fedkernels
