// Exact weighted 1D k-means by dynamic programming over the sorted distinct values.
// D_j(i) = min_a D_{j-1}(a - 1) + cost(a..i); the optimal split a is monotone in i (the cluster
// cost obeys the quadrangle inequality), so each layer is filled by divide and conquer:
// O(k n log n) time, O(k n) memory for the backtracking table (n = distinct values).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

namespace fedkernels {

class KMeans1dCost {
 public:
  KMeans1dCost(const std::vector<double>& v, const std::vector<double>& w)
      : w_(v.size() + 1), wv_(v.size() + 1), wvv_(v.size() + 1) {
    for (size_t i = 0; i < v.size(); ++i) {
      w_[i + 1] = w_[i] + w[i];
      wv_[i + 1] = wv_[i] + w[i] * v[i];
      wvv_[i + 1] = wvv_[i] + w[i] * v[i] * v[i];
    }
  }
  // Weighted squared error of the cluster v[a..b] (inclusive) around its weighted mean.
  double operator()(int64_t a, int64_t b) const {
    const double sw = w_[b + 1] - w_[a], swv = wv_[b + 1] - wv_[a], swvv = wvv_[b + 1] - wvv_[a];
    return std::max(0.0, swvv - swv * swv / sw);
  }

 private:
  std::vector<double> w_, wv_, wvv_;
};

inline std::tuple<std::vector<double>, std::vector<int64_t>, double> kmeans1d_optimal(
    const std::vector<double>& values, const std::vector<double>& weights, int64_t k) {
  const int64_t m = static_cast<int64_t>(values.size());
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return values[a] < values[b]; });
  // Merge equal values; centre on the weighted mean so prefix sums of squares cancel less.
  std::vector<double> v, w, raw;  // raw: the distinct values unshifted
  std::vector<int64_t> group(m);
  double tw = 0, twv = 0;
  for (int64_t i = 0; i < m; ++i) tw += weights[i], twv += weights[i] * values[i];
  const double shift = m ? twv / tw : 0.0;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t o = order[i];
    if (v.empty() || values[o] != values[order[i - 1]]) {
      v.push_back(values[o] - shift);
      raw.push_back(values[o]);
      w.push_back(0.0);
    }
    w.back() += weights[o];
    group[o] = static_cast<int64_t>(v.size()) - 1;
  }
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0) return {{}, {}, 0.0};
  k = std::min(k, n);
  const KMeans1dCost cost(v, w);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prev(n), cur(n, inf);
  std::vector<int32_t> split(static_cast<size_t>(k) * n, 0);  // split[j*n + i] = first index of the last cluster
  for (int64_t i = 0; i < n; ++i) prev[i] = cost(0, i);
  // fill(lo, hi, alo, ahi): cur[i] for i in [lo, hi] with split a in [alo, ahi].
  auto fill = [&](auto&& self, int64_t j, int64_t lo, int64_t hi, int64_t alo, int64_t ahi) -> void {
    if (lo > hi) return;
    const int64_t mid = (lo + hi) / 2;
    double best = inf;
    int64_t arg = std::max<int64_t>(alo, j);
    for (int64_t a = std::max<int64_t>(alo, j); a <= std::min(ahi, mid); ++a) {
      const double c = prev[a - 1] + cost(a, mid);
      if (c < best) best = c, arg = a;
    }
    cur[mid] = best;
    split[j * n + mid] = static_cast<int32_t>(arg);
    self(self, j, lo, mid - 1, alo, arg);
    self(self, j, mid + 1, hi, arg, ahi);
  };
  for (int64_t j = 1; j < k; ++j) {
    std::fill(cur.begin(), cur.end(), inf);
    fill(fill, j, j, n - 1, j, n - 1);
    std::swap(prev, cur);
  }
  // Backtrack the k clusters covering v[0..n-1].
  std::vector<int64_t> start(k);
  for (int64_t j = k - 1, end = n - 1; j >= 0; --j) {
    start[j] = j == 0 ? 0 : split[j * n + end];
    end = start[j] - 1;
  }
  std::vector<double> centres(k);
  std::vector<int64_t> cluster_of(n);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t end = j + 1 < k ? start[j + 1] - 1 : n - 1;
    // the centre from the unshifted values, summed directly (no prefix-sum cancellation)
    double sw = 0.0, swv = 0.0;
    for (int64_t i = start[j]; i <= end; ++i) {
      cluster_of[i] = j;
      sw += w[i];
      swv += w[i] * raw[i];
    }
    centres[j] = swv / sw;
  }
  std::vector<int64_t> labels(m);
  for (int64_t i = 0; i < m; ++i) labels[i] = cluster_of[group[i]];
  return {centres, labels, prev[n - 1]};
}

}  // namespace fedkernels
