// Argument checks of the spreadout ops, shared by the CPU and CUDA launchers.
#pragma once

#include <ATen/ops/arange.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>

#include <algorithm>
#include <string>

#include "common/checks.h"
#include "spread/spread.h"

namespace fedkernels {

inline int parse_metric(const std::string& metric) {
  if (metric == "l2") return spread::kL2;
  if (metric == "cosine") return spread::kCosine;
  TORCH_CHECK_VALUE(false, "metric must be \"l2\" or \"cosine\", got \"", metric, "\"");
  return -1;
}

// W: float32/float16/bfloat16/float64 [C, d] (its values unchecked).
inline void check_class_matrix_shape(const at::Tensor& W) {
  check_floating(W, "W");
  check_dim(W, 2, "W");
}

// W: float32/float16/bfloat16/float64 [C, d] with finite values.
inline void check_class_matrix(const at::Tensor& W) {
  check_class_matrix_shape(W);
  if (W.numel() > 0) {
    // In row chunks of about 2^20 entries: isfinite's temporaries would otherwise be several [C, d]
    // tensors, more than knn_classes itself needs. One host sync at the end.
    const int64_t step = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, W.size(1)));
    at::Tensor ok = at::ones({}, W.options().dtype(at::kBool));
    for (int64_t r0 = 0; r0 < W.size(0); r0 += step) {
      ok.logical_and_(at::isfinite(W.narrow(0, r0, std::min(step, W.size(0) - r0))).all());
    }
    TORCH_CHECK_VALUE(ok.item<bool>(), "W must be finite (it has NaN or inf entries)");
  }
}

// 0 <= k < C, except k = 0 which is always allowed (empty result).
inline void check_k(int64_t k, int64_t num_classes) {
  TORCH_CHECK_VALUE(k >= 0, "k must be >= 0, got ", k);
  TORCH_CHECK_VALUE(k == 0 || k < num_classes, "k must be < C (the number of classes, ", num_classes,
                    ") since a class is not its own neighbour, got k = ", k);
}

inline void check_knn_args(const at::Tensor& W, int64_t k, const std::string& metric) {
  check_class_matrix(W);
  check_k(k, W.size(0));
  parse_metric(metric);
}

// check_knn_args without the scan for NaN/inf, for a launcher that finds them in a pass it makes anyway
// (it must raise the same "W must be finite" error before writing anything).
inline void check_knn_shape_args(const at::Tensor& W, int64_t k, const std::string& metric) {
  check_class_matrix_shape(W);
  check_k(k, W.size(0));
  parse_metric(metric);
}

// idx: int64 [C, k] of class ids in [0, C) (a neighbour list as knn_classes returns).
inline void check_neighbours(const at::Tensor& idx, int64_t num_classes, const at::Tensor& W) {
  check_dtype(idx, at::kLong, "idx");
  check_dim(idx, 2, "idx");
  TORCH_CHECK_VALUE(idx.size(0) == num_classes, "idx must have one row per class (", num_classes, "), got shape ",
                    idx.sizes());
  check_same_device(idx, "idx", W, "W");
  check_index_range(idx, 0, num_classes, "idx");
}

// Sparse pair weights: CSR over C rows, each row's column ids strictly increasing in [0, C),
// values float32, finite and >= 0.
inline void check_pair_weights(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& values,
                               int64_t num_classes) {
  check_csr(indptr, indices, "pair_weight indptr", "pair_weight indices");
  TORCH_CHECK_VALUE(indptr.numel() == num_classes + 1, "pair_weight indptr must have C + 1 = ", num_classes + 1,
                    " entries, got ", indptr.numel());
  check_dtype(values, at::kFloat, "pair_weight values");
  check_dim(values, 1, "pair_weight values");
  TORCH_CHECK_VALUE(values.numel() == indices.numel(), "pair_weight values must have one entry per index (",
                    indices.numel(), "), got ", values.numel());
  check_same_device(values, "pair_weight values", indices, "pair_weight indices");
  check_index_range(indices, 0, num_classes, "pair_weight indices");
  if (values.numel() > 0) {
    TORCH_CHECK_VALUE(at::isfinite(values).all().item<bool>(), "pair_weight values must be finite");
    TORCH_CHECK_VALUE(values.min().item<float>() >= 0.0f, "pair_weight values must be >= 0");
  }
  const auto ip = indptr.to(at::kCPU).contiguous();
  const auto ix = indices.to(at::kCPU).contiguous();
  const int64_t* p = ip.data_ptr<int64_t>();
  const int64_t* c = ix.data_ptr<int64_t>();
  for (int64_t r = 0; r < num_classes; ++r) {
    for (int64_t q = p[r] + 1; q < p[r + 1]; ++q) {
      TORCH_CHECK_VALUE(c[q] > c[q - 1], "pair_weight indices must be strictly increasing within each row (row ", r,
                        ")");
    }
  }
}

inline void check_pair_weight_gather_args(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& values,
                                          const at::Tensor& idx) {
  check_dtype(idx, at::kLong, "idx");
  check_dim(idx, 2, "idx");
  check_pair_weights(indptr, indices, values, idx.size(0));
  check_same_device(idx, "idx", indices, "pair_weight indices");
  check_index_range(idx, 0, idx.size(0), "idx");
}

// The pairs (r, j) pointing at each class t, for the backward: flat ids r * k + j grouped by target
// (stable, so ascending within a target) and bounds [C + 1] into them. ATen ops, any device.
inline std::tuple<at::Tensor, at::Tensor> reverse_pairs(const at::Tensor& idx) {
  const auto sorted = at::sort(idx.reshape({-1}), /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const at::Tensor bounds = at::searchsorted(std::get<0>(sorted), at::arange(idx.size(0) + 1, idx.options()));
  return {std::get<1>(sorted).contiguous(), bounds.contiguous()};
}

inline void check_pair_loss_args(const at::Tensor& W, const at::Tensor& idx, const at::Tensor& weight, double margin,
                                 const std::string& metric) {
  check_class_matrix(W);
  check_neighbours(idx, W.size(0), W);
  check_dtype(weight, at::kFloat, "weight");
  TORCH_CHECK_VALUE(weight.sizes() == idx.sizes(), "weight must have the shape of idx ", idx.sizes(), ", got ",
                    weight.sizes());
  check_same_device(weight, "weight", W, "W");
  if (weight.numel() > 0) {
    TORCH_CHECK_VALUE(at::isfinite(weight).all().item<bool>() && weight.min().item<float>() >= 0.0f,
                      "weight must be finite and >= 0");
  }
  TORCH_CHECK_VALUE(std::isfinite(margin) && margin >= 0.0, "margin must be finite and >= 0, got ", margin);
  parse_metric(metric);
}

}  // namespace fedkernels
