// Argument checks of the sampled-softmax ops, shared by the CPU and CUDA launchers.
#pragma once

#include <string>

#include "common/checks.h"

namespace fedkernels {

// Accumulation dtype of linear_cross_entropy / scatter_rows_mean: float64 stays float64, the rest float32.
inline at::ScalarType acc_dtype_of(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

inline void check_sample_negatives_counts(int64_t num_classes, int64_t m) {
  TORCH_CHECK_VALUE(num_classes >= 0, "num_classes must be >= 0, got ", num_classes);
  TORCH_CHECK_VALUE(m >= 0, "m must be >= 0, got ", m);
}

inline void check_sample_negatives_args(const at::Tensor& positives, int64_t num_classes, int64_t m) {
  check_sample_negatives_counts(num_classes, m);
  check_dtype(positives, at::kLong, "positives");
  check_dim(positives, 1, "positives");
  check_index_range(positives, 0, num_classes, "positives");
}

inline void check_sample_negatives_batched_args(const at::Tensor& indptr, const at::Tensor& indices,
                                                int64_t num_classes, int64_t m) {
  check_sample_negatives_counts(num_classes, m);
  check_csr(indptr, indices, "indptr", "indices");
  check_index_range(indices, 0, num_classes, "indices (positives)");
}

inline int64_t lce_reduction_code(const std::string& reduction) {
  if (reduction == "none") return 0;
  if (reduction == "sum") return 1;
  if (reduction == "mean") return 2;
  TORCH_CHECK_VALUE(false, "reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  return -1;
}

// h [N, d], W [s, d] (same floating dtype), target int64 [N] in [0, s) or == ignore_index,
// bias [s] floating or absent; all on one device.
inline void check_lce_args(const at::Tensor& h, const at::Tensor& W, const at::Tensor& target,
                           const std::optional<at::Tensor>& bias, int64_t ignore_index, int64_t chunk_size) {
  check_floating(h, "h");
  check_dim(h, 2, "h");
  check_dim(W, 2, "W");
  TORCH_CHECK_VALUE(W.scalar_type() == h.scalar_type(), "W must have the dtype of h (", h.scalar_type(), "), got ",
                    W.scalar_type());
  TORCH_CHECK_VALUE(W.size(1) == h.size(1), "W must have shape [s, d] with d = h.size(1) = ", h.size(1), ", got ",
                    W.sizes());
  check_dtype(target, at::kLong, "target");
  check_dim(target, 1, "target");
  TORCH_CHECK_VALUE(target.size(0) == h.size(0), "target must have shape [N] with N = h.size(0) = ", h.size(0),
                    ", got ", target.sizes());
  check_same_device(h, "h", W, "W");
  check_same_device(h, "h", target, "target");
  if (bias.has_value()) {
    check_floating(*bias, "bias");
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == W.size(0), "bias must have shape [s] = [", W.size(0),
                      "], got ", bias->sizes());
    check_same_device(h, "h", *bias, "bias");
  }
  TORCH_CHECK_VALUE(chunk_size >= 0, "chunk_size must be >= 0 (0 picks the default), got ", chunk_size);
  const auto live = target.masked_select(target.ne(ignore_index));
  check_index_range(live, 0, W.size(0), "target (other than ignore_index)");
}

// The backward's extra inputs: lse, grad_loss, grad_lse, each [N] in the accumulation dtype.
inline void check_lce_backward_args(const at::Tensor& h, const at::Tensor& lse, const at::Tensor& grad_loss,
                                    const at::Tensor& grad_lse) {
  const auto acc = acc_dtype_of(h.scalar_type());
  auto check_one = [&](const at::Tensor& t, const char* name) {
    check_dtype(t, acc, name);
    TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == h.size(0), name, " must have shape [N] = [", h.size(0),
                      "], got ", t.sizes());
    check_same_device(h, "h", t, name);
  };
  check_one(lse, "lse");
  check_one(grad_loss, "grad_loss");
  check_one(grad_lse, "grad_lse");
}

// out [n, d] contiguous floating, src [T, d] of out's dtype, idx int64 [T] in [0, n), weight [T]
// floating, finite and >= 0; one device.
inline void check_scatter_rows_mean_args(const at::Tensor& out, const at::Tensor& idx, const at::Tensor& src,
                                         const at::Tensor& weight) {
  check_floating(out, "out");
  check_dim(out, 2, "out");
  TORCH_CHECK_VALUE(out.is_contiguous(), "out must be contiguous (it is written in place)");
  check_dim(src, 2, "src");
  TORCH_CHECK_VALUE(src.scalar_type() == out.scalar_type(), "src must have the dtype of out (", out.scalar_type(),
                    "), got ", src.scalar_type());
  check_dtype(idx, at::kLong, "idx");
  check_dim(idx, 1, "idx");
  TORCH_CHECK_VALUE(src.size(0) == idx.size(0) && src.size(1) == out.size(1), "src must have shape [T, d] = [",
                    idx.size(0), ", ", out.size(1), "], got ", src.sizes());
  check_floating(weight, "weight");
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == idx.size(0), "weight must have shape [T] = [",
                    idx.size(0), "], got ", weight.sizes());
  check_same_device(out, "out", idx, "idx");
  check_same_device(out, "out", src, "src");
  check_same_device(out, "out", weight, "weight");
  check_index_range(idx, 0, out.size(0), "idx");
  if (weight.numel() > 0) {
    const bool ok = weight.ge(0).logical_and_(weight.isfinite()).all().item<bool>();
    TORCH_CHECK_VALUE(ok, "weight must be finite and >= 0");
  }
}

}  // namespace fedkernels
