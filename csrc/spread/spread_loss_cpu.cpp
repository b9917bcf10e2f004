// CPU launchers of the spreadout loss over selected pairs: weight lookup, forward, fused backward.
// Deterministic: every row sums its own pairs in order; reverse pairs reach their target through a
// stable sort by target (no atomics). Pair distances and the cosine projection are summed over dims in
// warp order (spread.h: lane_distance, cosine_projection) and the row sums in the CUDA launcher's
// two-pass tree (ordered_sum below), so the CPU's loss and gradient are bit-identical to the CUDA kernels'.
#include <algorithm>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/dispatch.h"
#include "common/stable/tensor.h"
#include "spread/spread.h"
#include "spread/spread_checks.h"

namespace fedkernels {

namespace {

Tensor pair_weight_gather_cpu(const Tensor& indptr, const Tensor& indices, const Tensor& values, const Tensor& idx_in) {
  check_pair_weight_gather_args(indptr, indices, values, idx_in);
  const int64_t c = idx_in.size(0), k = idx_in.size(1);
  const Tensor ip = contiguous_or_self(indptr), ix = contiguous_or_self(indices), vv = contiguous_or_self(values),
               idx = contiguous_or_self(idx_in);
  Tensor out = empty_on(values, {c, k});
  const int64_t *p = ip.const_data_ptr<int64_t>(), *cols = ix.const_data_ptr<int64_t>(),
                *nb = idx.const_data_ptr<int64_t>();
  const float* v = vv.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  torch::stable::parallel_for(0, c, 1024, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t j = 0; j < k; ++j) o[r * k + j] = spread::pair_weight_lookup(p, cols, v, r, nb[r * k + j]);
  });
  return out;
}

// The sum of the row terms in the CUDA launcher's order (spread.h: kSumChunk, block_tree_sum).
double ordered_sum(const double* x, int64_t n) {
  if (n == 0) return 0.0;
  std::vector<double> chunks(static_cast<size_t>((n + spread::kSumChunk - 1) / spread::kSumChunk));
  for (size_t b = 0; b < chunks.size(); ++b) {
    const int64_t base = static_cast<int64_t>(b) * spread::kSumChunk;
    chunks[b] = spread::block_tree_sum(x + base, std::min(spread::kSumChunk, n - base));
  }
  return spread::block_tree_sum(chunks.data(), static_cast<int64_t>(chunks.size()));
}

std::vector<double> norms_if_cosine(const Tensor& W, int metric) {
  std::vector<double> norms;
  if (metric != spread::kCosine) return norms;
  const int64_t c = W.size(0), d = W.size(1);
  norms.resize(static_cast<size_t>(c));
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_norms", [&] {
    const scalar_t* w = W.const_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, c, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) norms[i] = std::sqrt(spread::row_sq_norm(w + i * d, d));
    });
  });
  return norms;
}

// Per-pair loss terms summed per row (rows[c]) and, when coefs is non-null, per-pair coefficients.
void pair_terms_cpu(const Tensor& W, const Tensor& idx, const Tensor& weight, double margin, int metric,
                    const std::vector<double>& norms, double* row_sums, double* coefs, double coef_scale) {
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  const int64_t* nb = idx.const_data_ptr<int64_t>();
  const float* wt = weight.const_data_ptr<float>();
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_pair_terms", [&] {
    const scalar_t* w = W.const_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, c, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        double s = 0.0;
        for (int64_t j = 0; j < k; ++j) {
          double coef = 0.0;
          s += spread::pair_term(w, r, nb[r * k + j], d, metric, norms.data(), wt[r * k + j], margin, &coef);
          if (coefs) coefs[r * k + j] = coef * coef_scale;
        }
        if (row_sums) row_sums[r] = s;
      }
    });
  });
}

Tensor spreadout_pair_loss_cpu(const Tensor& W_in, const Tensor& idx_in, const Tensor& weight_in, double margin,
                               std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  const int metric = parse_metric(metric_name);
  const Tensor W = contiguous_or_self(W_in), idx = contiguous_or_self(idx_in), weight = contiguous_or_self(weight_in);
  const ScalarType out_type = W.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  const int64_t c = W.size(0);
  std::vector<double> rows(static_cast<size_t>(c), 0.0);
  if (idx.size(1) > 0)
    pair_terms_cpu(W, idx, weight, margin, metric, norms_if_cosine(W, metric), rows.data(), nullptr, 1.0);
  const double total = ordered_sum(rows.data(), c);                     // fixed order: independent of the thread count
  return torch::stable::full(std::vector<int64_t>{}, total, out_type);  // on the host, as W
}

Tensor spreadout_pair_loss_backward_cpu(const Tensor& grad, const Tensor& W_in, const Tensor& idx_in,
                                        const Tensor& weight_in, double margin, std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  FK_CHECK_VALUE(grad.numel() == 1, "grad must be a scalar, got shape ", shape_text(grad.sizes()));
  const int metric = parse_metric(metric_name);
  const Tensor W = contiguous_or_self(W_in), idx = contiguous_or_self(idx_in), weight = contiguous_or_self(weight_in);
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  Tensor gw = zeros_on(W, W.sizes());
  if (k == 0 || c == 0) return gw;
  const double g = item_double(grad);
  const auto norms = norms_if_cosine(W, metric);
  std::vector<double> coefs(static_cast<size_t>(c * k));
  pair_terms_cpu(W, idx, weight, margin, metric, norms, nullptr, coefs.data(), g);
  // Reverse pairs grouped by target, in ascending pair id within a target (stable sort).
  const auto [order, bounds] = reverse_pairs(idx);
  const int64_t *nb = idx.const_data_ptr<int64_t>(), *rev = order.const_data_ptr<int64_t>(),
                *bd = bounds.const_data_ptr<int64_t>();
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spreadout_pair_loss_backward_cpu", [&] {
    const scalar_t* w = W.const_data_ptr<scalar_t>();
    scalar_t* out = gw.mutable_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, c, 16, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const double proj =
            spread::cosine_projection(w, t, d, k, metric, norms.data(), nb, coefs.data(), rev, bd[t], bd[t + 1]);
        spread::pair_grad_row(w, t, d, k, metric, norms.data(), nb, coefs.data(), rev, bd[t], bd[t + 1], out, 0, 1,
                              proj);
      }
    });
  });
  return gw;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("pair_weight_gather", TORCH_BOX(&pair_weight_gather_cpu));
  m.impl("spreadout_pair_loss", TORCH_BOX(&spreadout_pair_loss_cpu));
  m.impl("spreadout_pair_loss_backward", TORCH_BOX(&spreadout_pair_loss_backward_cpu));
}

}  // namespace fedkernels
