// Argument checks shared by every op. Each names the argument it rejects; TORCH_CHECK_VALUE
// raises ValueError, TORCH_CHECK_INDEX IndexError, TORCH_CHECK RuntimeError.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>

#include <string>

namespace fedkernels {

inline void check_dtype(const at::Tensor& t, at::ScalarType want, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == want, name, " must have dtype ", want, ", got ", t.scalar_type());
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == dim, name, " must be ", dim, "-D, got shape ", t.sizes());
}

inline void check_same_device(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
  TORCH_CHECK_VALUE(a.device() == b.device(), an, " and ", bn, " must be on the same device, got ", a.device(), " and ",
                    b.device());
}

inline void check_floating(const at::Tensor& t, const char* name) {
  const auto s = t.scalar_type();
  TORCH_CHECK_VALUE(s == at::kFloat || s == at::kHalf || s == at::kBFloat16 || s == at::kDouble, name,
                    " must be float32, float16, bfloat16 or float64, got ", s);
}

// Every value of an integer tensor lies in [lo, hi). One reduction; on CUDA it syncs once.
inline void check_index_range(const at::Tensor& t, int64_t lo, int64_t hi, const char* name) {
  if (t.numel() == 0) return;
  auto mm = at::aminmax(t);
  const int64_t mn = std::get<0>(mm).item<int64_t>();
  const int64_t mx = std::get<1>(mm).item<int64_t>();
  TORCH_CHECK_INDEX(mn >= lo && mx < hi, name, " values must lie in [", lo, ", ", hi, "), got min ", mn, " and max ",
                    mx);
}

// Every value of an integer tensor is >= 0.
inline void check_nonnegative(const at::Tensor& t, const char* name) {
  if (t.numel() == 0) return;
  const int64_t mn = t.min().item<int64_t>();
  TORCH_CHECK_INDEX(mn >= 0, name, " values must be >= 0, got min ", mn);
}

// A CSR row pointer over nnz entries: 1-D int64, starts at 0, non-decreasing, ends at nnz.
// The values are read through the tensor's stride: a strided, offset or expanded (stride 0) indptr is
// checked by its logical values, which are what the kernels read (they take .contiguous() copies).
inline void check_csr(const at::Tensor& indptr, const at::Tensor& indices, const char* indptr_name,
                      const char* indices_name) {
  check_dtype(indptr, at::kLong, indptr_name);
  check_dtype(indices, at::kLong, indices_name);
  check_dim(indptr, 1, indptr_name);
  check_dim(indices, 1, indices_name);
  check_same_device(indptr, indptr_name, indices, indices_name);
  TORCH_CHECK_VALUE(indptr.numel() >= 1, indptr_name, " must have at least one entry (N + 1)");
  const auto ip = indptr.to(at::kCPU);
  const int64_t* base = ip.const_data_ptr<int64_t>();
  const int64_t stride = ip.stride(0);
  const int64_t n = ip.numel();
  const auto p = [base, stride](int64_t i) { return base[i * stride]; };
  TORCH_CHECK_VALUE(p(0) == 0, indptr_name, "[0] must be 0, got ", p(0));
  TORCH_CHECK_VALUE(p(n - 1) == indices.numel(), indptr_name, "[-1] must equal ", indices_name,
                    ".numel() = ", indices.numel(), ", got ", p(n - 1));
  for (int64_t i = 1; i < n; ++i) {
    TORCH_CHECK_VALUE(p(i) >= p(i - 1), indptr_name, " must be non-decreasing (at position ", i, ")");
  }
}

}  // namespace fedkernels
