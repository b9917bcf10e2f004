// Stable-ABI helpers the topk family needs beyond csrc/common/stable/'s vocabulary: narrow of a const
// tensor and the GEMM into a given output (at::mm_out); grad mode and empty_on come from their headers.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

#include "common/stable/calls.h"
#include "common/stable/alloc.h"  // empty_on
#include "common/stable/grad_mode.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"

namespace fedkernels {

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
