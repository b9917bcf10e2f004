// Argument checks shared by every op. Each names the argument it rejects; FK_CHECK_VALUE raises
// ValueError, FK_CHECK_INDEX IndexError.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"

namespace fedkernels {

inline void check_dtype(const Tensor& t, ScalarType want, const char* name) {
  FK_CHECK_VALUE(t.scalar_type() == want, name, " must have dtype ", want, ", got ", t.scalar_type());
}

inline void check_dim(const Tensor& t, int64_t dim, const char* name) {
  FK_CHECK_VALUE(t.dim() == dim, name, " must be ", dim, "-D, got shape ", shape_text(t.sizes()));
}

inline void check_same_device(const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  FK_CHECK_VALUE(same_device(a, b), an, " and ", bn, " must be on the same device, got ", device_text(a), " and ",
                 device_text(b));
}

inline void check_floating(const Tensor& t, const char* name) {
  const ScalarType s = t.scalar_type();
  FK_CHECK_VALUE(
      s == ScalarType::Float || s == ScalarType::Half || s == ScalarType::BFloat16 || s == ScalarType::Double, name,
      " must be float32, float16, bfloat16 or float64, got ", s);
}

// Integer host tensors up to this many values are read by a plain loop: a dispatched aminmax costs a
// small call more than its whole kernel, while above this the vectorised, parallel aminmax wins.
constexpr int64_t kHostMinMaxMax = int64_t{1} << 14;

// The least and greatest value of a non-empty host tensor of T.
template <typename T>
std::pair<int64_t, int64_t> host_min_max(const Tensor& t) {
  const Tensor c = contiguous_or_self(t);
  const T* p = c.const_data_ptr<T>();
  const int64_t n = c.numel();  // once: numel() is a call into torch, which would keep the loop scalar
  T mn = p[0], mx = p[0];
  for (int64_t i = 1; i < n; ++i) {
    mn = std::min(mn, p[i]);
    mx = std::max(mx, p[i]);
  }
  return {mn, mx};
}

// min and max of a non-empty integer tensor: a loop for small int64 / int32 host tensors, else one
// aminmax (on CUDA it syncs once).
inline std::pair<int64_t, int64_t> min_max_int(const Tensor& t) {
  if (t.is_cpu() && t.numel() <= kHostMinMaxMax) {
    if (t.scalar_type() == ScalarType::Long) return host_min_max<int64_t>(t);
    if (t.scalar_type() == ScalarType::Int) return host_min_max<int32_t>(t);
  }
  const auto [mn_t, mx_t] = call_aten_pair("aten::aminmax", "", t, std::optional<int64_t>(), false);
  return {item_int64(mn_t), item_int64(mx_t)};
}

// Every value of an integer tensor lies in [lo, hi).
inline void check_index_range(const Tensor& t, int64_t lo, int64_t hi, const char* name) {
  if (t.numel() == 0) return;
  const auto [mn, mx] = min_max_int(t);
  FK_CHECK_INDEX(mn >= lo && mx < hi, name, " values must lie in [", lo, ", ", hi, "), got min ", mn, " and max ", mx);
}

// Every value of an integer tensor is >= 0.
inline void check_nonnegative(const Tensor& t, const char* name) {
  if (t.numel() == 0) return;
  const int64_t mn = min_max_int(t).first;
  FK_CHECK_INDEX(mn >= 0, name, " values must be >= 0, got min ", mn);
}

// A CSR row pointer over nnz entries: 1-D int64, starts at 0, non-decreasing, ends at nnz.
// The values are read through the tensor's stride: a strided, offset or expanded (stride 0) indptr is
// checked by its logical values, which are what the kernels read (they take contiguous copies).
inline void check_csr(const Tensor& indptr, const Tensor& indices, const char* indptr_name, const char* indices_name) {
  check_dtype(indptr, ScalarType::Long, indptr_name);
  check_dtype(indices, ScalarType::Long, indices_name);
  check_dim(indptr, 1, indptr_name);
  check_dim(indices, 1, indices_name);
  check_same_device(indptr, indptr_name, indices, indices_name);
  FK_CHECK_VALUE(indptr.numel() >= 1, indptr_name, " must have at least one entry (N + 1)");
  const Tensor ip = indptr.is_cpu() ? indptr : torch::stable::to(indptr, cpu_device());
  const int64_t* base = ip.const_data_ptr<int64_t>();
  const int64_t stride = ip.stride(0);
  const int64_t n = ip.numel();
  const auto p = [base, stride](int64_t i) { return base[i * stride]; };
  FK_CHECK_VALUE(p(0) == 0, indptr_name, "[0] must be 0, got ", p(0));
  FK_CHECK_VALUE(p(n - 1) == indices.numel(), indptr_name, "[-1] must equal ", indices_name,
                 ".numel() = ", indices.numel(), ", got ", p(n - 1));
  for (int64_t i = 1; i < n; ++i) {
    FK_CHECK_VALUE(p(i) >= p(i - 1), indptr_name, " must be non-decreasing (at position ", i, ")");
  }
}

}  // namespace fedkernels
