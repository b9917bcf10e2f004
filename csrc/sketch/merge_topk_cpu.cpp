// CPU launcher of bucket_merge_topk: exact pruning for the mean (threshold passes over per-table
// cutoffs), an in-order scan for the median; rows in parallel, each keeping its heap in its output row.

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/stable/dispatch.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

namespace {

// Classes of every (table j, bucket b), ascending (CSR by counting sort): the visiting lists of the
// threshold pass below. Table 0's lists also carry the classes' table rows, copied in the same order,
// so the bucket scan of table 0 reads the table sequentially. Built once per call: 4 (2 R + 1) p
// bytes plus 8 R B, independent of N.
struct TableLists {
  std::vector<int64_t> offsets;  // [R * B + 1]: list (j, b) is members[offsets[j*B+b] : offsets[j*B+b+1]]
  std::vector<int32_t> members;  // [R * p]
  std::vector<int32_t> rows0;    // [p, R]: table rows of table 0's members, in members' order
};

TableLists invert_table_cpu(const int32_t* table, int64_t p, int64_t r, int64_t nb) {
  TableLists inv{std::vector<int64_t>(r * nb + 1, 0), std::vector<int32_t>(r * p), std::vector<int32_t>(p * r)};
  for (int64_t l = 0; l < p; ++l) {
    for (int64_t j = 0; j < r; ++j) ++inv.offsets[j * nb + table[l * r + j] + 1];
  }
  for (int64_t q = 0; q < r * nb; ++q) inv.offsets[q + 1] += inv.offsets[q];
  std::vector<int64_t> fill(inv.offsets.begin(), inv.offsets.end() - 1);
  for (int64_t l = 0; l < p; ++l) {
    for (int64_t j = 0; j < r; ++j) {
      const int64_t e = fill[j * nb + table[l * r + j]]++;
      inv.members[e] = static_cast<int32_t>(l);
      if (j == 0) std::copy(table + l * r, table + (l + 1) * r, inv.rows0.begin() + e * r);
    }
  }
  return inv;
}

// Exact top-k of the mean for one NaN-free row, in two passes around per-table cutoffs c_j (about
// the B / kCutoffDiv-th largest value of table j's row, from a strided sample; any value works).
//  1. Threshold pass (Fagin's TA, one step): every class with v_j >= c_j for some j, each visited
//     once, from the first such table. Every class left has v_j < c_j for all j, so its score is at
//     most mean(c) (added in the kernel's order; rounded addition is monotone). If the heap's root
//     is strictly above that bound, no class left can enter: done. This is what prunes flat scores,
//     where the per-table maxima bound below removes almost nothing.
//  2. Otherwise scan the rest by table-0 bucket, with c_j in place of table j's row maximum in the
//     bounds (a class left has v_j < c_j), skipping the classes pass 1 visited.
// Bounds are compared strictly (classes are not visited by id), so ties are settled by heap_offer's
// (value, id) order whatever the visiting order.
constexpr int64_t kCutoffDiv = 64;    // pass 1 visits about R / kCutoffDiv of the classes
constexpr int64_t kSampleSize = 512;  // cutoff sample per table: a strided subset of the B values
constexpr int64_t kRowsAhead = 8;     // table rows prefetched ahead in the first pass

// Per-table cutoffs of one source row; false when the row holds a NaN.
template <typename scalar_t, typename acc_t>
bool row_cutoffs(const scalar_t* src, int64_t table_stride, int64_t r, int64_t nb, acc_t* cut,
                 std::vector<acc_t>& sample) {
  const int64_t step = std::max<int64_t>(1, nb / kSampleSize);
  const int64_t depth = std::max<int64_t>(1, nb / kCutoffDiv);  // in buckets
  for (int64_t j = 0; j < r; ++j) {
    const scalar_t* row = src + j * table_stride;
    bool nan = false;
    for (int64_t b = 0; b < nb; ++b) nan |= fk_isnan(row[b]);
    if (nan) return false;
    sample.clear();
    for (int64_t b = 0; b < nb; b += step) sample.push_back(static_cast<acc_t>(row[b]));
    const int64_t m = static_cast<int64_t>(sample.size());
    const int64_t q = std::min(m - 1, std::max<int64_t>(0, (depth + step - 1) / step - 1));
    std::nth_element(sample.begin(), sample.begin() + q, sample.end(), std::greater<acc_t>());
    cut[j] = sample[q];
  }
  return true;
}

// Whether pass 1 visited the class with table row trow: some table j < j_end has v_j >= c_j.
template <typename scalar_t, typename acc_t>
bool visited_before(const scalar_t* src, int64_t table_stride, const int32_t* trow, const acc_t* cut, int64_t j_end) {
  bool seen = false;
  for (int64_t j = 0; j < j_end; ++j) seen |= static_cast<acc_t>(src[j * table_stride + trow[j]]) >= cut[j];
  return seen;
}

template <typename scalar_t, typename acc_t>
void topk_row_threshold(const scalar_t* src, int64_t table_stride, const int32_t* table, int64_t r, int64_t nb,
                        const TableLists& inv, const acc_t* cut, int64_t k, scalar_t* vals, int64_t* ids) {
  int64_t size = 0;
  // pass 1
  for (int64_t j = 0; j < r; ++j) {
    const scalar_t* row = src + j * table_stride;
    for (int64_t b = 0; b < nb; ++b) {
      if (!(static_cast<acc_t>(row[b]) >= cut[j])) continue;
      const int64_t e0 = inv.offsets[j * nb + b], e1 = inv.offsets[j * nb + b + 1];
      // a bucket's classes are scattered over the table: fetch their rows kRowsAhead ahead
      for (int64_t e = e0; e < std::min(e1, e0 + kRowsAhead); ++e) __builtin_prefetch(table + inv.members[e] * r);
      for (int64_t e = e0; e < e1; ++e) {
        if (e + kRowsAhead < e1) __builtin_prefetch(table + inv.members[e + kRowsAhead] * r);
        const int64_t l = inv.members[e];
        const int32_t* trow = table + l * r;
        if (j > 0 && visited_before<scalar_t, acc_t>(src, table_stride, trow, cut, j)) continue;
        const scalar_t v =
            static_cast<scalar_t>(merge_score<scalar_t, acc_t>(src, table_stride, trow, nullptr, r, kReduceMean));
        heap_offer(vals, ids, size, k, v, l);
      }
    }
  }
  const scalar_t rest = static_cast<scalar_t>(mean_bound(cut[0], cut, r));  // mean of the cutoffs
  if (size == k && static_cast<acc_t>(vals[0]) > static_cast<acc_t>(rest)) return;
  // pass 2: table-0 buckets below the cutoff; bounds use c_j as table j's maximum
  for (int64_t b = 0; b < nb; ++b) {
    const acc_t v0 = static_cast<acc_t>(src[b]);
    if (!(v0 < cut[0])) continue;  // pass 1 visited the whole bucket
    if (size == k && static_cast<acc_t>(static_cast<scalar_t>(mean_bound(v0, cut, r))) < static_cast<acc_t>(vals[0])) {
      continue;
    }
    for (int64_t e = inv.offsets[b]; e < inv.offsets[b + 1]; ++e) {
      const int32_t* trow = inv.rows0.data() + e * r;
      if (r > 1) {
        const acc_t v1 = static_cast<acc_t>(src[table_stride + trow[1]]);
        if (v1 >= cut[1]) continue;  // visited in pass 1
        if (size == k && r > 2 &&
            static_cast<acc_t>(static_cast<scalar_t>(mean_bound2(v0, v1, cut, r))) < static_cast<acc_t>(vals[0])) {
          continue;
        }
      }
      if (r > 2 && visited_before<scalar_t, acc_t>(src + 2 * table_stride, table_stride, trow + 2, cut + 2, r - 2)) {
        continue;
      }
      const scalar_t v =
          static_cast<scalar_t>(merge_score<scalar_t, acc_t>(src, table_stride, trow, nullptr, r, kReduceMean));
      heap_offer(vals, ids, size, k, v, static_cast<int64_t>(inv.members[e]));
    }
  }
}

}  // namespace

static std::tuple<Tensor, Tensor> bucket_merge_topk_cpu(const Tensor& logp, const Tensor& table, int64_t k,
                                                        std::string reduce_name) {
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  std::tuple<Tensor, Tensor> out = alloc_topk(a, k);
  Tensor& values = std::get<0>(out);
  Tensor& indices = std::get<1>(out);
  if (values.numel() == 0) return out;
  const int32_t* t = tb.const_data_ptr<int32_t>();
  // The mean visits classes by the threshold passes (pruned); the median scans classes in order.
  const TableLists inv = reduce == kReduceMean ? invert_table_cpu(t, p, r, nb) : TableLists{};
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    const scalar_t* src = lp.const_data_ptr<scalar_t>();
    scalar_t* vals = values.mutable_data_ptr<scalar_t>();
    int64_t* ids = indices.mutable_data_ptr<int64_t>();
    torch::stable::parallel_for(0, n_rows, merge_row_grain(p * r), [&](int64_t begin, int64_t end) {
      // The heaps live in the output rows; per thread R cutoffs and their sample.
      std::vector<acc_t> cut(r), sample;
      for (int64_t n = begin; n < end; ++n) {
        const scalar_t* row = src + n * nb;
        if (reduce == kReduceMean && row_cutoffs<scalar_t, acc_t>(row, n_rows * nb, r, nb, cut.data(), sample)) {
          topk_row_threshold<scalar_t, acc_t>(row, n_rows * nb, t, r, nb, inv, cut.data(), k, vals + n * k,
                                              ids + n * k);
        } else {  // median, or a row holding NaN (NaN ranks first, so no bound applies): scan every class
          int64_t size = 0;
          merge_topk_range<scalar_t, acc_t>(row, n_rows * nb, t, r, reduce, 0, p, nullptr, k, vals + n * k, ids + n * k,
                                            size);
        }
        heap_to_sorted(vals + n * k, ids + n * k, k);
      }
    });
  });
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("bucket_merge_topk", TORCH_BOX(&bucket_merge_topk_cpu)); }

}  // namespace fedkernels
