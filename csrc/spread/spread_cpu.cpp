// CPU launcher of knn_classes. The distance matrix is symmetric, so only block pairs (I <= J) of
// kBlock x kBlock GEMM keys are computed (at::mm into a per-thread buffer; BLAS runs single-threaded
// inside the parallel region); each block feeds the candidate lists of its rows and, transposed, of
// its columns. To keep that race-free and deterministic, block pairs run in round-robin rounds in
// which every block appears once (all diagonal blocks first), so each row's list has one writer per
// round; the kept set does not depend on the order of offers. A final pass recomputes the kept
// candidates in float64 (or rescans rows with too many near-ties; see spread.h).
// Extra memory: C x (k + 8) candidates and two [kBlock, kBlock] key tiles per thread.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <utility>
#include <vector>

#include "common/dispatch.h"
#include "spread/spread.h"
#include "spread/spread_checks.h"

namespace fedkernels {

namespace {

constexpr int64_t kBlock = 256;
constexpr int64_t kChunk = 64;  // keys tested together before any per-entry branching

// Float64 norms of every row (cosine needs them for the exact recompute and the keys).
template <typename T>
std::vector<double> row_norms(const T* w, int64_t c, int64_t d) {
  std::vector<double> norms(static_cast<size_t>(c));
  at::parallel_for(0, c, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) norms[i] = std::sqrt(spread::row_sq_norm(w + i * d, d));
  });
  return norms;
}

// Rounds of block pairs (I < J) by the circle method: each of the t blocks appears at most once per round.
std::vector<std::vector<std::pair<int64_t, int64_t>>> pair_rounds(int64_t t) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rounds;
  const int64_t n = t + (t & 1);  // an odd count gets a bye (index t)
  for (int64_t r = 0; r + 1 < n; ++r) {
    std::vector<std::pair<int64_t, int64_t>> round;
    auto add = [&](int64_t a, int64_t b) {
      if (a < t && b < t) round.emplace_back(std::min(a, b), std::max(a, b));
    };
    add(r, n - 1);
    for (int64_t q = 1; q < n / 2; ++q) add((r + q) % (n - 1), (r - q + n - 1) % (n - 1));
    rounds.push_back(std::move(round));
  }
  return rounds;
}

// dst [n, m] = src [m, n]^T, in 16 x 16 sub-blocks so both sides stay in cache.
template <typename ACC>
void transpose_tile(const ACC* src, int64_t m, int64_t n, ACC* dst) {
  constexpr int64_t kSub = 16;
  for (int64_t r0 = 0; r0 < m; r0 += kSub)
    for (int64_t c0 = 0; c0 < n; c0 += kSub)
      for (int64_t r = r0; r < std::min(r0 + kSub, m); ++r)
        for (int64_t cc = c0; cc < std::min(c0 + kSub, n); ++cc) dst[cc * m + r] = src[r * n + cc];
}

// The running candidate lists of all rows.
template <typename ACC>
struct Candidates {
  int64_t k, cap;
  int metric;
  const ACC* col_term;  // l2: |w_j|^2; cosine: -1 / |w_j|
  std::vector<ACC> keys, bands;
  std::vector<int64_t> ids, sizes;
  std::vector<char> overflow;

  ACC gate(int64_t i) const {  // keys above this can neither enter nor signal an overflow
    if (sizes[i] < cap) return std::numeric_limits<ACC>::infinity();
    const ACC* kr = keys.data() + i * cap;
    return std::max(kr[cap - 1], kr[k - 1] + bands[i]);
  }

  // Offer row i the keys of columns col0 .. col0 + n from one row of a GEMM tile.
  void scan(int64_t i, const ACC* g, int64_t col0, int64_t n) {
    ACC* kr = keys.data() + i * cap;
    int64_t* ir = ids.data() + i * cap;
    int64_t& sz = sizes[i];
    bool of = overflow[i];
    ACC gt = gate(i);
    const ACC* ct = col_term + col0;
    for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
      const int64_t m = std::min(kChunk, n - j0);
      ACC kk[kChunk];
      ACC mn = std::numeric_limits<ACC>::infinity();
      if (metric == spread::kL2) {
#pragma omp simd reduction(min : mn)
        for (int64_t t = 0; t < m; ++t) {
          kk[t] = ct[j0 + t] - ACC(2) * g[j0 + t];
          mn = kk[t] < mn ? kk[t] : mn;
        }
      } else {
#pragma omp simd reduction(min : mn)
        for (int64_t t = 0; t < m; ++t) {
          kk[t] = ct[j0 + t] * g[j0 + t];
          mn = kk[t] < mn ? kk[t] : mn;
        }
      }
      if (mn > gt) continue;
      for (int64_t t = 0; t < m; ++t) {
        const int64_t j = col0 + j0 + t;
        if (kk[t] > gt || j == i) continue;
        if (sz == cap && kk[t] > kr[cap - 1]) {
          of = true;  // a near-tie of the k-th that the list cannot hold
          continue;
        }
        spread::candidate_offer(kr, ir, sz, cap, k, bands[i], kk[t], j, of);
        gt = gate(i);
      }
    }
    overflow[i] = of;
  }
};

template <typename T, typename ACC>
void knn_cpu_impl(const at::Tensor& W, const at::Tensor& Wacc, int64_t k, int metric, at::Tensor& dist,
                  at::Tensor& idx) {
  const int64_t c = W.size(0), d = W.size(1);
  const T* w = W.data_ptr<T>();
  const std::vector<double> norms = row_norms(w, c, d);
  std::vector<ACC> col_term(static_cast<size_t>(c));
  double max_norm = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    max_norm = std::max(max_norm, norms[j]);
    col_term[j] = metric == spread::kL2
                      ? static_cast<ACC>(norms[j] * norms[j])
                      : static_cast<ACC>(-1.0 / (norms[j] > spread::kCosineEps ? norms[j] : spread::kCosineEps));
  }
  const double unit_roundoff = std::is_same_v<ACC, double> ? 0x1p-53 : 0x1p-24;
  Candidates<ACC> cand;
  cand.k = k;
  cand.cap = std::min<int64_t>(spread::candidate_capacity(k), c - 1);
  cand.metric = metric;
  cand.col_term = col_term.data();
  cand.keys.resize(static_cast<size_t>(c * cand.cap));
  cand.ids.resize(static_cast<size_t>(c * cand.cap));
  cand.sizes.assign(static_cast<size_t>(c), 0);
  cand.overflow.assign(static_cast<size_t>(c), 0);
  cand.bands.resize(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) cand.bands[i] = static_cast<ACC>(spread::key_band(metric, d, unit_roundoff, norms[i], max_norm));

  const int64_t t = (c + kBlock - 1) / kBlock;
  auto block_rows = [&](int64_t b) { return Wacc.narrow(0, b * kBlock, std::min(kBlock, c - b * kBlock)); };
  auto run_pairs = [&](const std::vector<std::pair<int64_t, int64_t>>& pairs) {
    at::parallel_for(0, static_cast<int64_t>(pairs.size()), 1, [&](int64_t pb, int64_t pe) {
      at::Tensor buf = at::empty({2 * kBlock * kBlock}, Wacc.options());
      for (int64_t p = pb; p < pe; ++p) {
        const auto [bi, bj] = pairs[p];
        const at::Tensor a = block_rows(bi), b = block_rows(bj);
        const int64_t na = a.size(0), nb = b.size(0);
        at::Tensor g = buf.narrow(0, 0, na * nb).view({na, nb});
        at::mm_out(g, a, b.t());
        const ACC* gp = g.data_ptr<ACC>();
        for (int64_t r = 0; r < na; ++r) cand.scan(bi * kBlock + r, gp + r * nb, bj * kBlock, nb);
        if (bi == bj) continue;
        ACC* gtp = buf.data_ptr<ACC>() + kBlock * kBlock;
        transpose_tile(gp, na, nb, gtp);
        for (int64_t r = 0; r < nb; ++r) cand.scan(bj * kBlock + r, gtp + r * na, bi * kBlock, na);
      }
    });
  };
  std::vector<std::pair<int64_t, int64_t>> diagonal;
  for (int64_t b = 0; b < t; ++b) diagonal.emplace_back(b, b);
  run_pairs(diagonal);
  for (const auto& round : pair_rounds(t)) run_pairs(round);

  ACC* out_dist = dist.data_ptr<ACC>();
  int64_t* out_idx = idx.data_ptr<int64_t>();
  at::parallel_for(0, c, 64, [&](int64_t rb, int64_t re) {
    std::vector<double> exact(static_cast<size_t>(cand.cap));
    std::vector<int64_t> scratch_ids(static_cast<size_t>(k));
    for (int64_t i = rb; i < re; ++i) {
      if (cand.overflow[i]) {
        spread::knn_exact_row(w, i, c, d, metric, norms.data(), exact.data(), scratch_ids.data(), k, out_dist, out_idx);
      } else {
        spread::knn_finalize_row(w, i, d, metric, norms.data(), cand.ids.data() + i * cand.cap, cand.sizes[i],
                                 exact.data(), k, out_dist, out_idx);
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
