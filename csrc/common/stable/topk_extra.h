// Stable-ABI helpers the topk family needs beyond csrc/common/stable/'s vocabulary: grad mode off for a
// scope (at::NoGradGuard), narrow of a const tensor, an allocation without the dispatcher and the GEMM into a given
// output (at::mm_out).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

#include <array>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// Grad mode off while the guard lives, restored after (at::NoGradGuard): an out= op refuses an
// input that requires grad while grad mode is on, and a launcher's inner ops go through autograd.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(aoti_torch_grad_mode_is_enabled()) { aoti_torch_grad_mode_set_enabled(false); }
  ~NoGradGuard() { aoti_torch_grad_mode_set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// t.narrow(dim, start, length) of a const tensor (a view): torch::stable::narrow takes a non-const
// reference, though it changes nothing of its argument.
inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Tensor handle = t;  // another handle to the same tensor
  return torch::stable::narrow(handle, dim, start, length);
}

// A new contiguous tensor of `sizes` (at most 8 dimensions) and `dtype` on like's device, like
// torch::stable::new_empty, but allocated by the shim's empty_strided directly: new_empty goes
// through the dispatcher, which looks the op up by name and boxes its arguments on every call, a
// cost a small call of an op pays once per output.
inline Tensor empty_on(const Tensor& like, IntArrayRef sizes, ScalarType dtype) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  FK_CHECK(ndim <= 8, "empty_on: at most 8 dimensions, got ", ndim);
  std::array<int64_t, 8> strides{};
  int64_t stride = 1;
  for (int64_t i = ndim; i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 1 ? sizes[i] : 1;
  }
  int32_t device_type = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  const int32_t shim_dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(ndim, sizes.data(), strides.data(), shim_dtype, device_type,
                                                         like.get_device_index(), &out));
  return Tensor(out);
}

// out = a @ b (aten::mm.out; out has the result's shape and dtype). Returns out.
inline Tensor mm_out(const Tensor& out, const Tensor& a, const Tensor& b) {
  return call_aten_tensor("aten::mm", "out", a, b, out);
}

}  // namespace fedkernels
