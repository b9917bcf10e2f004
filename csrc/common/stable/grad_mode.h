// Grad mode off for a scope, through the C shim (at::NoGradGuard): an out= op refuses an input that
// requires grad while grad mode is on, and a launcher's inner ops (its GEMMs) go through autograd.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

namespace fedkernels {

class NoGradGuard {
 public:
  NoGradGuard() : prev_(aoti_torch_grad_mode_is_enabled()) { aoti_torch_grad_mode_set_enabled(false); }
  ~NoGradGuard() { aoti_torch_grad_mode_set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace fedkernels
