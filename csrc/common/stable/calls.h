// ATen ops the stable ABI has no wrapper for, called through the stable dispatcher by schema name
// (torch_call_dispatcher), and the small host reads the launchers make of a tensor's values.
#pragma once

#include <torch/csrc/stable/stableivalue_conversions.h>

#include <algorithm>
#include <array>
#include <utility>

#include "common/stable/check.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// Calls aten::<name>.<overload> with the arguments in schema order (every argument, defaults
// included) and returns the stack: its first `kReturns` slots hold the results.
template <size_t kReturns, typename... Args>
auto call_aten(const char* name, const char* overload, Args&&... args) {
  constexpr size_t n = std::max(sizeof...(Args), kReturns);
  std::array<StableIValue, n> stack{torch::stable::detail::from(std::forward<Args>(args))...};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return stack;
}

// One tensor result.
template <typename... Args>
Tensor call_aten_tensor(const char* name, const char* overload, Args&&... args) {
  auto stack = call_aten<1>(name, overload, std::forward<Args>(args)...);
  return torch::stable::detail::to<Tensor>(stack[0]);
}

// Two tensor results (sort, aminmax, ...).
template <typename... Args>
std::pair<Tensor, Tensor> call_aten_pair(const char* name, const char* overload, Args&&... args) {
  auto stack = call_aten<2>(name, overload, std::forward<Args>(args)...);
  return {torch::stable::detail::to<Tensor>(stack[0]), torch::stable::detail::to<Tensor>(stack[1])};
}

// t.expand(sizes) (a view).
inline Tensor expand(const Tensor& t, IntArrayRef sizes) {
  return call_aten_tensor("aten::expand", "", t, sizes, false);
}

// t.to(dtype), a dispatcher call only when it has work to do (ATen returns t itself otherwise).
inline Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  return t.scalar_type() == dtype ? t : torch::stable::to(t, dtype);
}

// A tensor converted to `dtype` on the host (a copy only when it is not already that).
inline Tensor to_cpu(const Tensor& t, ScalarType dtype) {
  Tensor c = t.is_cpu() ? t : torch::stable::to(t, cpu_device());
  return to_dtype(c, dtype);
}

// The single value of a one-element tensor, read on the host (syncs a CUDA tensor's stream).
template <typename T>
T item(const Tensor& t, ScalarType as) {
  FK_CHECK(t.numel() == 1, "item() of a tensor with ", t.numel(), " elements");
  return *to_cpu(t, as).template const_data_ptr<T>();
}
inline double item_double(const Tensor& t) { return item<double>(t, ScalarType::Double); }
inline int64_t item_int64(const Tensor& t) { return item<int64_t>(t, ScalarType::Long); }
inline bool item_bool(const Tensor& t) { return item<bool>(t, ScalarType::Bool); }

// Reductions to one element (the whole tensor).
inline Tensor all(const Tensor& t) { return call_aten_tensor("aten::all", "", t); }
inline Tensor any(const Tensor& t) { return call_aten_tensor("aten::any", "", t); }
inline Tensor min(const Tensor& t) { return call_aten_tensor("aten::min", "", t); }
inline Tensor max(const Tensor& t) { return call_aten_tensor("aten::max", "", t); }
inline Tensor isfinite(const Tensor& t) { return call_aten_tensor("aten::isfinite", "", t); }

}  // namespace fedkernels
