// Stable-ABI calls the sampled family needs beyond common/stable/calls.h: the ATen ops of its
// host-side preparation (sort, unique_consecutive, bincount, ...) by schema name, small 0-D host
// tensors standing in for the Scalar operands the stable dispatcher cannot pass, and addmm with its
// alpha through torch's C shim (aoti_torch_<device>_addmm_out, declared here: the generated shim
// headers are outside the headers the stable units may reach, and addmm's Scalar alpha cannot go
// through the dispatcher).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/checks.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"

extern "C" {
// torch/csrc/inductor/aoti_torch/generated/c_shim_{cpu,cuda}.h: out = beta * self + alpha * (mat1 @ mat2).
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                          AtenTensorHandle mat1, AtenTensorHandle mat2, double beta,
                                                          double alpha);
// out = self @ mat2 (c_shim_cpu.h): the CPU tile GEMMs, without a dispatcher call per tile.
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                       AtenTensorHandle mat2);
#if defined(FK_WITH_CUDA) && !defined(FK_CUDA_EMU)
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                           AtenTensorHandle mat1, AtenTensorHandle mat2, double beta,
                                                           double alpha);
#endif
}

namespace fedkernels {

// at::opmath_type of the floating dtypes: float for float16 / bfloat16 / float32, double for float64.
template <typename T>
using opmath_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
constexpr ScalarType opmath_scalar_type() {
  return std::is_same_v<opmath_t<T>, double> ? ScalarType::Double : ScalarType::Float;
}

// Three tensor results (unique_consecutive).
template <typename... Args>
std::tuple<Tensor, Tensor, Tensor> call_aten_triple(const char* name, const char* overload, Args&&... args) {
  auto stack = call_aten<3>(name, overload, std::forward<Args>(args)...);
  return {torch::stable::detail::to<Tensor>(stack[0]), torch::stable::detail::to<Tensor>(stack[1]),
          torch::stable::detail::to<Tensor>(stack[2])};
}

// Direct shim calls for the CPU kernels' per-tile tensors (allocations and views): each of these
// through the dispatcher costs about as long as a small call's whole GEMM.
namespace host {

// A view of t's storage with the given sizes and strides, starting `shift` elements after t's first
// (the shim's _reinterpret_tensor adds its offset to t's storage offset).
inline Tensor view_as(const Tensor& t, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                      int64_t shift) {
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(t.get(), static_cast<int64_t>(sizes.size()),
                                                               sizes.data(), strides.data(), shift, &out));
  return Tensor(out);
}

// Rows [r0, r0 + rows) of a contiguous 2-D tensor.
inline Tensor rows(const Tensor& t, int64_t r0, int64_t rows) {
  return view_as(t, {rows, t.size(1)}, {t.stride(0), t.stride(1)}, r0 * t.stride(0));
}
// The transpose of a 2-D tensor.
inline Tensor t(const Tensor& m) { return view_as(m, {m.size(1), m.size(0)}, {m.stride(1), m.stride(0)}, 0); }
// The first `count` elements of a contiguous tensor as a contiguous [r, c] matrix (count = r * c).
inline Tensor matrix(const Tensor& t, int64_t r, int64_t c) { return view_as(t, {r, c}, {c, 1}, 0); }
// Entry i of the leading dimension of a contiguous tensor, as a [size(1), size(2)] matrix.
inline Tensor slab(const Tensor& t, int64_t i) {
  return view_as(t, {t.size(1), t.size(2)}, {t.stride(1), t.stride(2)}, i * t.stride(0));
}

// out = a @ b on CPU tensors (out of the right shape).
inline void mm_out(Tensor& out, const Tensor& a, const Tensor& b) {
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_cpu_mm_out(out.get(), a.get(), b.get()));
}

}  // namespace host

// A 0-D host tensor holding v: the operand of a comparison with a number (ATen's Scalar overloads
// cannot be called; a 0-D CPU tensor takes part on any device, and the other tensor's dtype wins).
inline Tensor host_scalar_long(int64_t v) {
  Tensor t = torch::stable::empty({}, ScalarType::Long);
  *t.mutable_data_ptr<int64_t>() = v;
  return t;
}
inline Tensor host_scalar_double(double v) {
  Tensor t = torch::stable::empty({}, ScalarType::Double);
  *t.mutable_data_ptr<double>() = v;
  return t;
}

// 0, 1, ..., n - 1 (int64) on like's device: made on the host (arange takes Scalars).
inline Tensor arange_long(int64_t n, const Tensor& like) {
  Tensor t = torch::stable::empty({n}, ScalarType::Long);
  int64_t* p = t.mutable_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  return like.is_cpu() ? t : torch::stable::to(t, like.device());
}

// A 1-D int64 tensor of the given values on like's device.
inline Tensor long_tensor(const std::vector<int64_t>& values, const Tensor& like) {
  Tensor t = torch::stable::empty({static_cast<int64_t>(values.size())}, ScalarType::Long);
  int64_t* p = t.mutable_data_ptr<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return like.is_cpu() ? t : torch::stable::to(t, like.device());
}

// t.narrow(dim, start, length) of a const tensor (a view; torch::stable::narrow takes a non-const one).
inline Tensor narrow_view(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Tensor c = t;
  return torch::stable::narrow(c, dim, start, length);
}
// check_index_range (common/stable/checks.h) with a host loop for a 1-D CPU tensor: the same test and
// message, without the reduction and its dispatcher calls (the small calls' main cost). Values
// equal to `skip` (if given) are left out, as `t[t != skip]` would be.
inline void check_index_range_1d(const Tensor& t, int64_t lo, int64_t hi, const char* name,
                                 std::optional<int64_t> skip = std::nullopt) {
  if (!t.is_cpu() || t.dim() != 1 || t.scalar_type() != ScalarType::Long) {
    if (!skip.has_value()) return check_index_range(t, lo, hi, name);
    const Tensor skip_t = host_scalar_long(*skip);
    const Tensor live =
        call_aten_tensor("aten::masked_select", "", t, call_aten_tensor("aten::ne", "Tensor", t, skip_t));
    return check_index_range(live, lo, hi, name);
  }
  const int64_t* p = t.const_data_ptr<int64_t>();
  const int64_t n = t.numel(), stride = t.stride(0);
  bool any = false;
  int64_t mn = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = p[i * stride];
    if (skip.has_value() && v == *skip) continue;
    mn = any ? std::min(mn, v) : v;
    mx = any ? std::max(mx, v) : v;
    any = true;
  }
  if (!any) return;
  FK_CHECK_INDEX(mn >= lo && mx < hi, name, " values must lie in [", lo, ", ", hi, "), got min ", mn, " and max ", mx);
}

// ATen ops by schema name, qualified (aten::ne, ...) at the call sites: torch::stable grows wrappers
// of the same names, which argument-dependent lookup would otherwise make ambiguous.
namespace aten {

inline Tensor detach(const Tensor& t) { return call_aten_tensor("aten::detach", "", t); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::ne", "Tensor", a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::ge", "Tensor", a, b); }
inline Tensor le(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::le", "Tensor", a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::div", "Tensor", a, b); }
inline Tensor clamp_min(const Tensor& a, const Tensor& lo) {
  return call_aten_tensor("aten::clamp_min", "Tensor", a, lo);
}
inline Tensor logical_and_(Tensor& a, const Tensor& b) { return call_aten_tensor("aten::logical_and_", "", a, b); }
inline Tensor logical_or_(Tensor& a, const Tensor& b) { return call_aten_tensor("aten::logical_or_", "", a, b); }
inline Tensor masked_select(const Tensor& t, const Tensor& mask) {
  return call_aten_tensor("aten::masked_select", "", t, mask);
}
inline Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  return call_aten_tensor("aten::index_select", "", t, dim, index);
}
// The sum of all elements (aten::sum, dtype kept: int64 for bool and integer input).
inline Tensor sum_all(const Tensor& t) { return call_aten_tensor("aten::sum", "", t, std::optional<ScalarType>()); }
inline Tensor cumsum(const Tensor& t, int64_t dim) {
  return call_aten_tensor("aten::cumsum", "", t, dim, std::optional<ScalarType>());
}
// t[1:] - t[:-1] of a 1-D tensor.
inline Tensor diff(const Tensor& t) {
  return call_aten_tensor("aten::diff", "", t, int64_t(1), int64_t(-1), std::optional<Tensor>(),
                          std::optional<Tensor>());
}
inline Tensor bincount(const Tensor& t, int64_t minlength) {
  return call_aten_tensor("aten::bincount", "", t, std::optional<Tensor>(), minlength);
}
// repeat_interleave(self, repeats) of 1-D tensors, with the output length known.
inline Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, int64_t output_size) {
  return call_aten_tensor("aten::repeat_interleave", "self_Tensor", t, repeats, std::optional<int64_t>(),
                          std::optional<int64_t>(output_size));
}
// (values, indices) of a stable ascending sort along dim.
inline std::pair<Tensor, Tensor> sort_stable(const Tensor& t, int64_t dim) {
  return call_aten_pair("aten::sort", "stable", t, std::optional<bool>(true), dim, false);
}
// (values, indices) of an ascending sort along dim (aten::sort, not stable).
inline std::pair<Tensor, Tensor> sort(const Tensor& t, int64_t dim) {
  return call_aten_pair("aten::sort", "", t, dim, false);
}
// (distinct values, inverse (empty), counts) of a sorted 1-D tensor.
inline std::tuple<Tensor, Tensor, Tensor> unique_consecutive_counts(const Tensor& t) {
  return call_aten_triple("aten::unique_consecutive", "", t, false, true, std::optional<int64_t>());
}
inline Tensor neg(const Tensor& t) { return call_aten_tensor("aten::neg", "", t); }
inline Tensor stack(const std::vector<Tensor>& ts, int64_t dim) { return call_aten_tensor("aten::stack", "", ts, dim); }
// a - b, elementwise, for any dtype (integer ones too): torch::stable::subtract passes its alpha as
// a floating Scalar, which ATen refuses for integer tensors, and aten::sub takes a Scalar alpha.
// Summed as a + (-b) over a stacked pair, exact for integers.
inline Tensor sub_exact(const Tensor& a, const Tensor& b) {
  const std::vector<int64_t> dims{0};
  return torch::stable::sum(stack({a, neg(b)}, 0), IntArrayRef(dims), false, std::nullopt);
}
inline Tensor mm(const Tensor& a, const Tensor& b) { return call_aten_tensor("aten::mm", "", a, b); }
// out = a @ b, written into out (its shape already right).
inline void mm_out(Tensor& out, const Tensor& a, const Tensor& b) {
  (void)call_aten_tensor("aten::mm", "out", a, b, out);
}
// self += alpha * (a @ b) in place (Tensor.addmm_(a, b, beta=1, alpha)): one GEMM with the
// accumulation in it, as ATen's addmm_ runs it (the same kernel, the same bits).
inline void addmm_(Tensor& self, const Tensor& a, const Tensor& b, double alpha) {
  if (self.is_cpu()) {
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_cpu_addmm_out(self.get(), self.get(), a.get(), b.get(), 1.0, alpha));
    return;
  }
#if defined(FK_WITH_CUDA) && !defined(FK_CUDA_EMU)
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_addmm_out(self.get(), self.get(), a.get(), b.get(), 1.0, alpha));
#else
  FK_CHECK(false, "addmm_: no shim for this tensor's device in this build");
#endif
}

}  // namespace aten

// The transpose of a 2-D tensor (a view).
inline Tensor t2(const Tensor& t) { return torch::stable::transpose(t, 0, 1); }

}  // namespace fedkernels
