// Stable-ABI helpers the topk family needs beyond csrc/common/stable/'s vocabulary: grad mode off for a
// scope (at::NoGradGuard), narrow of a const tensor and the GEMM into a given output (at::mm_out).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "common/stable/calls.h"
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

// out = a @ b (aten::mm.out; out has the result's shape and dtype). Returns out.
inline Tensor mm_out(const Tensor& out, const Tensor& a, const Tensor& b) {
  return call_aten_tensor("aten::mm", "out", a, b, out);
}

}  // namespace fedkernels
