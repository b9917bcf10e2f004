// Argument checks of the spreadout ops, shared by the CPU and CUDA launchers.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/spread_extra.h"
#include "common/stable/tensor.h"
#include "spread/spread.h"

namespace fedkernels {

inline int parse_metric(const std::string& metric) {
  if (metric == "l2") return spread::kL2;
  if (metric == "cosine") return spread::kCosine;
  FK_CHECK_VALUE(false, "metric must be \"l2\" or \"cosine\", got \"", metric, "\"");
  return -1;
}

// W: float32/float16/bfloat16/float64 [C, d] (its values unchecked).
inline void check_class_matrix_shape(const Tensor& W) {
  check_floating(W, "W");
  check_dim(W, 2, "W");
}

// W: float32/float16/bfloat16/float64 [C, d] with finite values.
inline void check_class_matrix(const Tensor& W) {
  check_class_matrix_shape(W);
  if (host_scan(W)) {
    FK_CHECK_VALUE(host_float_stats(W).finite, "W must be finite (it has NaN or inf entries)");
  } else if (W.numel() > 0) {
    // In row chunks of about 2^20 entries: isfinite's temporaries would otherwise be several [C, d]
    // tensors, more than knn_classes itself needs. One host sync at the end.
    const int64_t step = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, W.size(1)));
    Tensor ok = scalar_like(W, 1.0, ScalarType::Bool);
    Tensor rows = W;  // a handle: stable narrow takes a non-const one
    for (int64_t r0 = 0; r0 < W.size(0); r0 += step) {
      logical_and_(ok, all_finite(torch::stable::narrow(rows, 0, r0, std::min(step, W.size(0) - r0))));
    }
    FK_CHECK_VALUE(item_bool(ok), "W must be finite (it has NaN or inf entries)");
  }
}

// 0 <= k < C, except k = 0 which is always allowed (empty result).
inline void check_k(int64_t k, int64_t num_classes) {
  FK_CHECK_VALUE(k >= 0, "k must be >= 0, got ", k);
  FK_CHECK_VALUE(k == 0 || k < num_classes, "k must be < C (the number of classes, ", num_classes,
                 ") since a class is not its own neighbour, got k = ", k);
}

inline void check_knn_args(const Tensor& W, int64_t k, const std::string& metric) {
  check_class_matrix(W);
  check_k(k, W.size(0));
  parse_metric(metric);
}

// check_knn_args without the scan for NaN/inf, for a launcher that finds them in a pass it makes anyway
// (it must raise the same "W must be finite" error before writing anything).
inline void check_knn_shape_args(const Tensor& W, int64_t k, const std::string& metric) {
  check_class_matrix_shape(W);
  check_k(k, W.size(0));
  parse_metric(metric);
}

// idx: int64 [C, k] of class ids in [0, C) (a neighbour list as knn_classes returns).
inline void check_neighbours(const Tensor& idx, int64_t num_classes, const Tensor& W) {
  check_dtype(idx, ScalarType::Long, "idx");
  check_dim(idx, 2, "idx");
  FK_CHECK_VALUE(idx.size(0) == num_classes, "idx must have one row per class (", num_classes, "), got shape ",
                 shape_text(idx.sizes()));
  check_same_device(idx, "idx", W, "W");
  check_index_range(idx, 0, num_classes, "idx");
}

// Sparse pair weights: CSR over C rows, each row's column ids strictly increasing in [0, C),
// values float32, finite and >= 0.
inline void check_pair_weights(const Tensor& indptr, const Tensor& indices, const Tensor& values, int64_t num_classes) {
  check_csr(indptr, indices, "pair_weight indptr", "pair_weight indices");
  FK_CHECK_VALUE(indptr.numel() == num_classes + 1, "pair_weight indptr must have C + 1 = ", num_classes + 1,
                 " entries, got ", indptr.numel());
  check_dtype(values, ScalarType::Float, "pair_weight values");
  check_dim(values, 1, "pair_weight values");
  FK_CHECK_VALUE(values.numel() == indices.numel(), "pair_weight values must have one entry per index (",
                 indices.numel(), "), got ", values.numel());
  check_same_device(values, "pair_weight values", indices, "pair_weight indices");
  check_index_range(indices, 0, num_classes, "pair_weight indices");
  if (host_scan(values)) {
    const HostFloatStats st = host_float_stats(values);
    FK_CHECK_VALUE(st.finite, "pair_weight values must be finite");
    FK_CHECK_VALUE(st.min >= 0.0, "pair_weight values must be >= 0");
  } else if (values.numel() > 0) {
    FK_CHECK_VALUE(item_bool(all_finite(values)), "pair_weight values must be finite");
    FK_CHECK_VALUE(item_double(min(values)) >= 0.0, "pair_weight values must be >= 0");
  }
  const Tensor ip = contiguous_or_self(to_cpu(indptr, ScalarType::Long));
  const Tensor ix = contiguous_or_self(to_cpu(indices, ScalarType::Long));
  const int64_t* p = ip.const_data_ptr<int64_t>();
  const int64_t* c = ix.const_data_ptr<int64_t>();
  for (int64_t r = 0; r < num_classes; ++r) {
    for (int64_t q = p[r] + 1; q < p[r + 1]; ++q) {
      FK_CHECK_VALUE(c[q] > c[q - 1], "pair_weight indices must be strictly increasing within each row (row ", r, ")");
    }
  }
}

inline void check_pair_weight_gather_args(const Tensor& indptr, const Tensor& indices, const Tensor& values,
                                          const Tensor& idx) {
  check_dtype(idx, ScalarType::Long, "idx");
  check_dim(idx, 2, "idx");
  check_pair_weights(indptr, indices, values, idx.size(0));
  check_same_device(idx, "idx", indices, "pair_weight indices");
  check_index_range(idx, 0, idx.size(0), "idx");
}

// The pairs (r, j) pointing at each class t, for the backward: flat ids r * k + j grouped by target
// (stable, so ascending within a target) and bounds [C + 1] into them. ATen ops, any device.
inline std::tuple<Tensor, Tensor> reverse_pairs(const Tensor& idx) {
  const auto [values, order] = sort_stable(torch::stable::reshape(idx, {-1}), /*dim=*/0, /*descending=*/false);
  const Tensor bounds = searchsorted(values, arange_like(idx, idx.size(0) + 1));
  return {contiguous_or_self(order), contiguous_or_self(bounds)};
}

inline void check_pair_loss_args(const Tensor& W, const Tensor& idx, const Tensor& weight, double margin,
                                 const std::string& metric) {
  check_class_matrix(W);
  check_neighbours(idx, W.size(0), W);
  check_dtype(weight, ScalarType::Float, "weight");
  const IntArrayRef ws = weight.sizes(), is = idx.sizes();
  FK_CHECK_VALUE(std::equal(ws.begin(), ws.end(), is.begin(), is.end()), "weight must have the shape of idx ",
                 shape_text(is), ", got ", shape_text(ws));
  check_same_device(weight, "weight", W, "W");
  if (host_scan(weight)) {
    const HostFloatStats st = host_float_stats(weight);
    FK_CHECK_VALUE(st.finite && st.min >= 0.0, "weight must be finite and >= 0");
  } else if (weight.numel() > 0) {
    FK_CHECK_VALUE(item_bool(all_finite(weight)) && item_double(min(weight)) >= 0.0, "weight must be finite and >= 0");
  }
  FK_CHECK_VALUE(std::isfinite(margin) && margin >= 0.0, "margin must be finite and >= 0, got ", margin);
  parse_metric(metric);
}

}  // namespace fedkernels
