// Argument checks of the sampled-softmax ops, shared by the CPU and CUDA launchers.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/dispatch.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// Accumulation dtype of linear_cross_entropy / scatter_rows_mean: float64 stays float64, the rest float32.
inline ScalarType acc_dtype_of(ScalarType t) {
  return t == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

inline void check_sample_negatives_counts(int64_t num_classes, int64_t m) {
  FK_CHECK_VALUE(num_classes >= 0, "num_classes must be >= 0, got ", num_classes);
  FK_CHECK_VALUE(m >= 0, "m must be >= 0, got ", m);
}

inline void check_sample_negatives_args(const Tensor& positives, int64_t num_classes, int64_t m) {
  check_sample_negatives_counts(num_classes, m);
  check_dtype(positives, ScalarType::Long, "positives");
  check_dim(positives, 1, "positives");
  check_index_range_1d(positives, 0, num_classes, "positives");
}

inline void check_sample_negatives_batched_args(const Tensor& indptr, const Tensor& indices, int64_t num_classes,
                                                int64_t m) {
  check_sample_negatives_counts(num_classes, m);
  check_csr(indptr, indices, "indptr", "indices");
  check_index_range_1d(indices, 0, num_classes, "indices (positives)");
}

inline int64_t lce_reduction_code(const std::string& reduction) {
  if (reduction == "none") return 0;
  if (reduction == "sum") return 1;
  if (reduction == "mean") return 2;
  FK_CHECK_VALUE(false, "reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  return -1;
}

// h [N, d], W [s, d] (same floating dtype), target int64 [N] in [0, s) or == ignore_index,
// bias [s] floating or absent; all on one device.
inline void check_lce_args(const Tensor& h, const Tensor& W, const Tensor& target, const std::optional<Tensor>& bias,
                           int64_t ignore_index, int64_t chunk_size) {
  check_floating(h, "h");
  check_dim(h, 2, "h");
  check_dim(W, 2, "W");
  FK_CHECK_VALUE(W.scalar_type() == h.scalar_type(), "W must have the dtype of h (", h.scalar_type(), "), got ",
                 W.scalar_type());
  FK_CHECK_VALUE(W.size(1) == h.size(1), "W must have shape [s, d] with d = h.size(1) = ", h.size(1), ", got ",
                 shape_text(W.sizes()));
  check_dtype(target, ScalarType::Long, "target");
  check_dim(target, 1, "target");
  FK_CHECK_VALUE(target.size(0) == h.size(0), "target must have shape [N] with N = h.size(0) = ", h.size(0), ", got ",
                 shape_text(target.sizes()));
  check_same_device(h, "h", W, "W");
  check_same_device(h, "h", target, "target");
  if (bias.has_value()) {
    check_floating(*bias, "bias");
    FK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == W.size(0), "bias must have shape [s] = [", W.size(0), "], got ",
                   shape_text(bias->sizes()));
    check_same_device(h, "h", *bias, "bias");
  }
  FK_CHECK_VALUE(chunk_size >= 0, "chunk_size must be >= 0 (0 picks the default), got ", chunk_size);
  check_index_range_1d(target, 0, W.size(0), "target (other than ignore_index)", ignore_index);
}

// The backward's extra inputs: lse, grad_loss, grad_lse, each [N] in the accumulation dtype.
inline void check_lce_backward_args(const Tensor& h, const Tensor& lse, const Tensor& grad_loss,
                                    const Tensor& grad_lse) {
  const auto acc = acc_dtype_of(h.scalar_type());
  auto check_one = [&](const Tensor& t, const char* name) {
    check_dtype(t, acc, name);
    FK_CHECK_VALUE(t.dim() == 1 && t.size(0) == h.size(0), name, " must have shape [N] = [", h.size(0), "], got ",
                   shape_text(t.sizes()));
    check_same_device(h, "h", t, name);
  };
  check_one(lse, "lse");
  check_one(grad_loss, "grad_loss");
  check_one(grad_lse, "grad_lse");
}

// The address range [first, last byte + 1) that t's elements span (for t with elements).
inline std::pair<uintptr_t, uintptr_t> byte_range(const Tensor& t) {
  int64_t lo = 0, hi = 0;  // element offsets from data_ptr of the lowest and highest element
  for (int64_t k = 0; k < t.dim(); ++k) {
    const int64_t reach = (t.size(k) - 1) * t.stride(k);
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.data_ptr());
  const auto item = static_cast<intptr_t>(t.element_size());
  return {base + lo * item, base + (hi + 1) * item};
}

// An input must not share memory with an output written in place: scatter_rows_mean writes rows
// of out while it still reads its sources and weights, so a view of out (src = out[:T], say) would
// be read after its own rows changed, and give wrong rows without any error. The test is on
// address ranges, so a strided input whose range straddles out is refused even if no element is
// shared (out is contiguous, so it is exact whenever the input is contiguous too).
inline void check_no_overlap(const Tensor& out, const Tensor& t, const char* name) {
  // The stable ABI does not expose storages: tensors of different storages never overlap in
  // memory, so the address ranges alone decide (as they did within one storage).
  if (out.numel() == 0 || t.numel() == 0 || out.data_ptr() == nullptr || t.data_ptr() == nullptr) return;
  const auto [o_lo, o_hi] = byte_range(out);
  const auto [t_lo, t_hi] = byte_range(t);
  FK_CHECK_VALUE(t_hi <= o_lo || o_hi <= t_lo, name,
                 " must not share memory with out (out is written in place "
                 "while ",
                 name, " is read): pass a copy, e.g. ", name, ".clone()");
}

// The weight tests of check_scatter_rows_mean_args on a CPU weight, element by element: finite and
// >= 0, and (narrowed: float64 weights for a float32 accumulation) at most float32's max.
inline void check_weight_values_host(const Tensor& weight, bool narrowed, ScalarType out_dtype) {
  const Tensor w = contiguous_or_self(weight);
  FK_DISPATCH_FLOAT_HALF_BF16(w.scalar_type(), "scatter_rows_mean", [&] {
    const scalar_t* p = w.const_data_ptr<scalar_t>();
    constexpr double kFloatMax = 3.4028234663852886e38;
    bool good = true, too_big = false;
    double most = -std::numeric_limits<double>::infinity();
    const int64_t n = w.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(p[i]);
      if (!(v >= 0) || !std::isfinite(v)) good = false;
      if (narrowed && v > kFloatMax) too_big = true;
      most = std::max(most, v);
    }
    FK_CHECK_VALUE(good, "weight must be finite and >= 0");
    FK_CHECK_VALUE(!too_big, "weight values must be at most float32's max (3.4e38) for a ", out_dtype,
                   " out (weights are summed in float32), got max ", most,
                   ": scale them down (a weighted mean does not depend on the weights' scale)");
  });
}

// out [n, d] contiguous floating, src [T, d] of out's dtype, idx int64 [T] in [0, n), weight [T]
// floating, finite, >= 0 and representable in the accumulation dtype; one device; no input sharing
// memory with out.
inline void check_scatter_rows_mean_args(const Tensor& out, const Tensor& idx, const Tensor& src,
                                         const Tensor& weight) {
  check_floating(out, "out");
  check_dim(out, 2, "out");
  FK_CHECK_VALUE(out.is_contiguous(), "out must be contiguous (it is written in place)");
  check_dim(src, 2, "src");
  FK_CHECK_VALUE(src.scalar_type() == out.scalar_type(), "src must have the dtype of out (", out.scalar_type(),
                 "), got ", src.scalar_type());
  check_dtype(idx, ScalarType::Long, "idx");
  check_dim(idx, 1, "idx");
  FK_CHECK_VALUE(src.size(0) == idx.size(0) && src.size(1) == out.size(1), "src must have shape [T, d] = [",
                 idx.size(0), ", ", out.size(1), "], got ", shape_text(src.sizes()));
  check_floating(weight, "weight");
  FK_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == idx.size(0), "weight must have shape [T] = [", idx.size(0),
                 "], got ", shape_text(weight.sizes()));
  check_same_device(out, "out", idx, "idx");
  check_same_device(out, "out", src, "src");
  check_same_device(out, "out", weight, "weight");
  check_no_overlap(out, idx, "idx");
  check_no_overlap(out, src, "src");
  check_no_overlap(out, weight, "weight");
  check_index_range_1d(idx, 0, out.size(0), "idx");
  if (weight.numel() > 0) {
    // Weights are summed in the accumulation dtype: float64 weights for a float32/float16/bfloat16
    // out must fit in float32 (one reduction either way; the cause is sorted out only on failure).
    const bool narrowed =
        weight.scalar_type() == ScalarType::Double && acc_dtype_of(out.scalar_type()) == ScalarType::Float;
    constexpr double kFloatMax = 3.4028234663852886e38;
    if (weight.is_cpu()) {  // a host loop: the same tests, without the small calls' tensor ops
      check_weight_values_host(weight, narrowed, out.scalar_type());
      return;
    }
    const Tensor zero = host_scalar_double(0.0);
    auto finite_nonneg = [&] {
      Tensor ok = aten::ge(weight, zero);
      return aten::logical_and_(ok, isfinite(weight));
    };
    Tensor good = finite_nonneg();
    if (narrowed) good = aten::logical_and_(good, aten::le(weight, host_scalar_double(kFloatMax)));
    if (!item_bool(all(good))) {
      FK_CHECK_VALUE(item_bool(all(finite_nonneg())), "weight must be finite and >= 0");
      FK_CHECK_VALUE(false, "weight values must be at most float32's max (3.4e38) for a ", out.scalar_type(),
                     " out (weights are summed in float32), got max ", item_double(max(weight)),
                     ": scale them down (a weighted mean does not depend on the weights' scale)");
    }
  }
}

}  // namespace fedkernels
