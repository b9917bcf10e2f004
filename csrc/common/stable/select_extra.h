// Small tensor helpers the select family's launchers need beyond common/stable/ (generic; a family
// that needs one may include this header).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

#include <algorithm>
#include <cstdint>

#include "common/stable/check.h"
#include "common/stable/tensor.h"

// For a struct with a member of a torch::stable type: torch declares those hidden (its
// HIDDEN_NAMESPACE), and GCC warns when a struct of default visibility holds one.
#if defined(__GNUG__) && !defined(_WIN32)
#define FK_STABLE_HIDDEN __attribute__((visibility("hidden")))
#else
#define FK_STABLE_HIDDEN
#endif

namespace fedkernels {

// t itself when it is contiguous, else a contiguous copy: ATen's Tensor::contiguous(), whose
// already-contiguous case costs no dispatcher call (torch::stable::contiguous always makes one).
inline Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

// An uninitialised 1-D host tensor of n elements: at::empty({n}, dtype) through the shim's direct
// entry point, without torch::stable::empty's dispatcher call by name (which a small call feels).
inline Tensor empty_cpu(int64_t n, ScalarType dtype) {
  const int64_t stride = 1;
  const int32_t shim_dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  AtenTensorHandle handle = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(1, &n, &stride, shim_dtype, aoti_torch_device_type_cpu(), 0, &handle));
  return Tensor(handle);
}

// checks.h's check_index_range for a host int64 tensor, read by a loop (no aminmax dispatch): the
// same IndexError, word for word.
inline void check_host_index_range(const Tensor& t, int64_t lo, int64_t hi, const char* name) {
  if (t.numel() == 0) return;
  const Tensor c = contiguous_of(t);
  const int64_t* p = c.const_data_ptr<int64_t>();
  const auto [mn_it, mx_it] = std::minmax_element(p, p + c.numel());
  const int64_t mn = *mn_it, mx = *mx_it;
  FK_CHECK_INDEX(mn >= lo && mx < hi, name, " values must lie in [", lo, ", ", hi, "), got min ", mn, " and max ", mx);
}

}  // namespace fedkernels
