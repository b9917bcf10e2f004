// Stable-ABI helpers the spread family needs beyond calls.h / checks.h: ATen ops called by schema
// (logical_and_, sort, searchsorted, mm.out, mul, clamp_min, reciprocal, neg) and the small
// tensors that ATen would build from a Scalar (a one, an arange), made on the host instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/dispatch.h"
#include "common/stable/grad_mode.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// A 0-D tensor holding `value` (in `dtype`, rounded as a Scalar fill rounds) on t's device.
inline Tensor scalar_like(const Tensor& t, double value, ScalarType dtype) {
  Tensor out = empty_on(t, std::vector<int64_t>{}, dtype);
  torch::stable::fill_(out, value);
  return out;
}

// t.logical_and_(other) (in place).
inline void logical_and_(Tensor& t, const Tensor& other) { call_aten_tensor("aten::logical_and_", "", t, other); }

// Every entry of t is finite: one bool on t's device, not read (the caller syncs once for several).
inline Tensor all_finite(const Tensor& t) { return all(isfinite(t)); }

// [0, 1, ..., n - 1] as int64 on t's device (aten::arange takes a Scalar: built on the host).
inline Tensor arange_like(const Tensor& t, int64_t n) {
  Tensor host = torch::stable::empty({n}, ScalarType::Long);
  int64_t* p = host.mutable_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  return t.is_cpu() ? host : torch::stable::to(host, t.device());
}

// at::sort(t, /*stable=*/true, dim, descending): (values, indices).
inline std::pair<Tensor, Tensor> sort_stable(const Tensor& t, int64_t dim, bool descending) {
  return call_aten_pair("aten::sort", "stable", t, std::optional<bool>(true), dim, descending);
}

// at::searchsorted(sorted_sequence, values) (left side, int64 result).
inline Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values) {
  return call_aten_tensor("aten::searchsorted", "Tensor", sorted_sequence, values, false, false,
                          std::optional<std::string>(), std::optional<Tensor>());
}

// at::mm_out(out, a, b).
inline void mm_out(Tensor& out, const Tensor& a, const Tensor& b) { call_aten_tensor("aten::mm", "out", a, b, out); }

// a * b (tensors).
inline Tensor mul(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::mul", "Tensor", a, b); }

// t.clamp_min(lo) with lo a 0-D tensor on t's device.
inline Tensor clamp_min(const Tensor& t, const Tensor& lo) {
  return call_aten_tensor("aten::clamp_min", "Tensor", t, lo);
}

// -1 / t as ATen computes the Scalar division (reciprocal, then times -1: the same bits as neg).
inline Tensor neg_reciprocal(const Tensor& t) {
  return call_aten_tensor("aten::neg", "", call_aten_tensor("aten::reciprocal", "", t));
}

// Small host tensors are checked by a loop instead of ATen reductions: every call through the stable
// dispatcher costs microseconds (a schema lookup, boxing), which small calls would notice; above this
// many entries the reductions (vectorised, parallel) win and the call costs nothing in comparison.
constexpr int64_t kHostScanMax = int64_t{1} << 16;

inline bool host_scan(const Tensor& t) { return t.is_cpu() && t.numel() <= kHostScanMax; }

// Finiteness and minimum of a floating host tensor's values, read by a loop (host_scan tensors).
struct HostFloatStats {
  bool finite = true;
  double min = 0.0;  // of the finite values; meaningful when finite
};
inline HostFloatStats host_float_stats(const Tensor& t) {
  HostFloatStats st;
  if (t.numel() == 0) return st;
  const Tensor c = contiguous_or_self(t);
  FK_DISPATCH_FLOAT_HALF_BF16(c.scalar_type(), "spread_host_float_stats", [&] {
    const scalar_t* p = c.const_data_ptr<scalar_t>();
    double mn = std::numeric_limits<double>::infinity();
    bool finite = true;
    const int64_t n = c.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v =
          std::is_same_v<scalar_t, double> ? static_cast<double>(p[i]) : static_cast<double>(static_cast<float>(p[i]));
      finite = finite && std::isfinite(v);
      mn = v < mn ? v : mn;
    }
    st.finite = finite;
    st.min = mn;
  });
  return st;
}

}  // namespace fedkernels
