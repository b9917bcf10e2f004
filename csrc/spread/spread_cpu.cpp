// CPU launcher of knn_classes: row tiles in parallel; for each row tile, column tiles of GEMM keys
// (at::mm into one reused buffer, single-threaded BLAS inside the parallel region) scanned into a
// running per-row candidate list, then a direct float64 recompute of the kept candidates.
// Extra memory: kRowTile x (2k + 16) candidates and one [kRowTile, kColTile] key tile per thread.
// Rows with more near-ties than the candidate slack holds are redone by an exact scan (spread.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "common/dispatch.h"
#include "spread/spread.h"
#include "spread/spread_checks.h"

namespace fedkernels {

namespace {

constexpr int64_t kRowTile = 128;
constexpr int64_t kColTile = 1024;

// Float64 norms of every row (cosine needs them for the exact recompute and the keys).
template <typename T>
std::vector<double> row_norms(const T* w, int64_t c, int64_t d) {
  std::vector<double> norms(static_cast<size_t>(c));
  at::parallel_for(0, c, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) norms[i] = std::sqrt(spread::row_sq_norm(w + i * d, d));
  });
  return norms;
}

template <typename T, typename ACC>
void knn_cpu_impl(const at::Tensor& W, const at::Tensor& Wacc, int64_t k, int metric, at::Tensor& dist,
                  at::Tensor& idx) {
  const int64_t c = W.size(0), d = W.size(1);
  const T* w = W.data_ptr<T>();
  const std::vector<double> norms = row_norms(w, c, d);
  // Column term of the ranking key: l2 adds |w_j|^2 to -2 w_i.w_j; cosine scales w_i.w_j by -1/|w_j|.
  std::vector<ACC> col_term(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j) {
    if (metric == spread::kL2) {
      col_term[j] = static_cast<ACC>(norms[j] * norms[j]);
    } else {
      col_term[j] = static_cast<ACC>(-1.0 / (norms[j] > spread::kCosineEps ? norms[j] : spread::kCosineEps));
    }
  }
  const int64_t cap = std::min<int64_t>(spread::candidate_capacity(k), c - 1);
  double max_norm = 0.0;
  for (int64_t j = 0; j < c; ++j) max_norm = std::max(max_norm, norms[j]);
  const double unit_roundoff = std::is_same_v<ACC, double> ? 0x1p-53 : 0x1p-24;
  const int64_t n_row_tiles = (c + kRowTile - 1) / kRowTile;
  ACC* out_dist = dist.data_ptr<ACC>();
  int64_t* out_idx = idx.data_ptr<int64_t>();

  at::parallel_for(0, n_row_tiles, 1, [&](int64_t tb, int64_t te) {
    at::Tensor tile = at::empty({kRowTile * kColTile}, Wacc.options());
    std::vector<ACC> keys(static_cast<size_t>(kRowTile * cap)), bands(kRowTile);
    std::vector<int64_t> ids(static_cast<size_t>(kRowTile * cap)), sizes(kRowTile);
    std::vector<char> overflow(kRowTile);
    std::vector<double> exact(static_cast<size_t>(cap));
    for (int64_t rt = tb; rt < te; ++rt) {
      const int64_t r0 = rt * kRowTile, nr = std::min(kRowTile, c - r0);
      for (int64_t r = 0; r < nr; ++r) {
        sizes[r] = 0;
        overflow[r] = 0;
        bands[r] = static_cast<ACC>(spread::key_band(metric, d, unit_roundoff, norms[r0 + r], max_norm));
      }
      const at::Tensor rows = Wacc.narrow(0, r0, nr);
      for (int64_t c0 = 0; c0 < c; c0 += kColTile) {
        const int64_t nc = std::min(kColTile, c - c0);
        at::Tensor g = tile.narrow(0, 0, nr * nc).view({nr, nc});
        at::mm_out(g, rows, Wacc.narrow(0, c0, nc).t());
        const ACC* gp = g.data_ptr<ACC>();
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = r0 + r;
          ACC* kr = keys.data() + r * cap;
          int64_t* ir = ids.data() + r * cap;
          int64_t& sz = sizes[r];
          bool of = overflow[r];
          const ACC band = bands[r];
          const ACC* grow = gp + r * nc;
          for (int64_t jj = 0; jj < nc; ++jj) {
            const int64_t j = c0 + jj;
            const ACC key = metric == spread::kL2 ? col_term[j] - ACC(2) * grow[jj] : col_term[j] * grow[jj];
            // Fast reject once the list is full: most entries stop here.
            if (sz == cap && key > kr[cap - 1]) {
              if (key <= kr[k - 1] + band && j != i) of = true;
              continue;
            }
            if (j == i) continue;
            spread::candidate_offer(kr, ir, sz, cap, k, band, key, j, of);
          }
          overflow[r] = of;
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        if (overflow[r]) {
          std::vector<double> ex(static_cast<size_t>(k));
          std::vector<int64_t> ix(static_cast<size_t>(k));
          spread::knn_exact_row(w, r0 + r, c, d, metric, norms.data(), ex.data(), ix.data(), k, out_dist, out_idx);
        } else {
          spread::knn_finalize_row(w, r0 + r, d, metric, norms.data(), ids.data() + r * cap, sizes[r], exact.data(),
                                   k, out_dist, out_idx);
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> knn_classes_cpu(const at::Tensor& W_in, int64_t k, std::string metric_name) {
  check_knn_args(W_in, k, metric_name);
  const int metric = parse_metric(metric_name);
  const at::Tensor W = W_in.contiguous();
  const int64_t c = W.size(0);
  const auto acc_type = W.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor dist = at::empty({c, k}, W.options().dtype(acc_type));
  at::Tensor idx = at::empty({c, k}, W.options().dtype(at::kLong));
  if (k == 0 || c == 0) return {dist, idx};
  // The GEMM runs on float32 (float64 for float64 W); half inputs get a float32 copy.
  const at::Tensor Wacc = W.scalar_type() == acc_type ? W : W.to(acc_type);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cpu", [&] {
    if constexpr (std::is_same_v<scalar_t, double>) {
      knn_cpu_impl<scalar_t, double>(W, Wacc, k, metric, dist, idx);
    } else {
      knn_cpu_impl<scalar_t, float>(W, Wacc, k, metric, dist, idx);
    }
  });
  return {dist, idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("knn_classes", &knn_classes_cpu); }

}  // namespace fedkernels
