// The tensor vocabulary of the ops built on the LibTorch stable ABI (torch/csrc/stable): every op
// unit includes this instead of ATen, so the built library calls torch only through its C shim and
// loads on every torch from the TORCH_TARGET_VERSION floor on (docs/developing.md, "The stable ABI").
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

// For a type holding a torch::stable type: torch declares those hidden, and GCC warns (-Wattributes)
// when a type of default visibility holds one.
#if defined(__GNUG__) && !defined(_WIN32)
#define FK_STABLE_HIDDEN __attribute__((visibility("hidden")))
#else
#define FK_STABLE_HIDDEN
#endif

namespace fedkernels {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using Device = torch::stable::Device;
using DeviceType = torch::headeronly::DeviceType;
using IntArrayRef = torch::headeronly::IntHeaderOnlyArrayRef;

// A shape or index list as ATen prints one: "[2, 3]".
struct ShapeText {
  IntArrayRef dims;
};
inline std::ostream& operator<<(std::ostream& os, const ShapeText& s) {
  os << '[';
  for (size_t i = 0; i < s.dims.size(); ++i) os << (i ? ", " : "") << s.dims[i];
  return os << ']';
}
inline ShapeText shape_text(IntArrayRef dims) { return {dims}; }

// A device as torch prints one: "cpu", "cuda:0".
struct DeviceText {
  const char* type;
  int index;  // -1: none
};
inline std::ostream& operator<<(std::ostream& os, const DeviceText& d) {
  os << d.type;
  if (d.index >= 0) os << ':' << d.index;
  return os;
}
inline DeviceText device_text(const Tensor& t) {
  const Device d = t.device();
  return {d.is_cuda() ? "cuda" : d.is_cpu() ? "cpu" : "device", d.has_index() ? static_cast<int>(d.index()) : -1};
}

// Both tensors on one device (type and index).
inline bool same_device(const Tensor& a, const Tensor& b) { return a.device() == b.device(); }

inline Device cpu_device() { return Device(DeviceType::CPU); }

// Every size of `a` either equals `b`'s (aligned from the right) or is 1, and `a` has no more
// dimensions: the rule of Tensor.expand (ATen's is_expandable_to).
inline bool is_expandable_to(IntArrayRef a, IntArrayRef b) {
  if (a.size() > b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && x != 1) return false;
  }
  return true;
}

// The product of a list of sizes (1 for an empty list).
inline int64_t product(IntArrayRef dims) {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

// The first `n` sizes of a tensor, as an owning vector.
inline std::vector<int64_t> leading_sizes(const Tensor& t, int64_t n) {
  const IntArrayRef s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.begin() + n);
}

}  // namespace fedkernels
