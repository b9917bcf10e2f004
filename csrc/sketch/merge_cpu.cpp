// CPU launchers of bucket_merge (rows in parallel, classes in chunks so a chunk of the table stays
// in cache while a small block of rows reuses it) and bucket_merge_topk (exact pruning for the mean).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/dispatch.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

namespace {
constexpr int64_t kClassChunk = 4096;  // 4096 * R int32 of table: L1/L2 resident
constexpr int64_t kRowBlock = 4;       // rows sharing one table chunk; their logp rows fit in L2

int64_t row_grain(int64_t work_per_row) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_row)); }
}  // namespace

static at::Tensor bucket_merge_cpu(const at::Tensor& logp, const at::Tensor& table, c10::string_view reduce_name) {
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  auto out = at::empty({n_rows, p}, lp.options());
  if (out.numel() == 0) return out;
  const int32_t* t = tb.const_data_ptr<int32_t>();
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* src = lp.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, n_rows, row_grain(p * r), [&](int64_t begin, int64_t end) {
      for (int64_t n0 = begin; n0 < end; n0 += kRowBlock) {
        const int64_t n1 = std::min(end, n0 + kRowBlock);
        for (int64_t c0 = 0; c0 < p; c0 += kClassChunk) {
          const int64_t c1 = std::min(p, c0 + kClassChunk);
          for (int64_t n = n0; n < n1; ++n) {
            for (int64_t l = c0; l < c1; ++l) {
              o[n * p + l] = static_cast<scalar_t>(
                  merge_score<scalar_t, acc_t>(src + n * nb, n_rows * nb, t + l * r, nullptr, r, reduce));
            }
          }
        }
      }
    });
  });
  return out;
}

namespace {

// Classes of each bucket of table 0, ascending (CSR by counting sort), with their table rows copied
// in the same order so a bucket's classes read the table sequentially: the visiting order of the
// pruned top-k below. Built once per call: 4 (R + 1) p bytes, independent of N.
struct FirstTableInverse {
  std::vector<int64_t> offsets;  // [B + 1]
  std::vector<int32_t> members;  // [p]
  std::vector<int32_t> rows;     // [p, R]: table rows of members
};

FirstTableInverse invert_first_table(const int32_t* table, int64_t p, int64_t r, int64_t nb) {
  FirstTableInverse inv{std::vector<int64_t>(nb + 1, 0), std::vector<int32_t>(p), std::vector<int32_t>(p * r)};
  for (int64_t l = 0; l < p; ++l) ++inv.offsets[table[l * r] + 1];
  for (int64_t b = 0; b < nb; ++b) inv.offsets[b + 1] += inv.offsets[b];
  std::vector<int64_t> fill(inv.offsets.begin(), inv.offsets.end() - 1);
  for (int64_t l = 0; l < p; ++l) {
    const int64_t e = fill[table[l * r]]++;
    inv.members[e] = static_cast<int32_t>(l);
    std::copy(table + l * r, table + (l + 1) * r, inv.rows.begin() + e * r);
  }
  return inv;
}

// Exact top-k of the mean for one NaN-free row. Table 0's best kFirstBuckets buckets are visited
// first (highest value first) to give the heap a good root; then every other bucket whose bound
// (its value plus the other tables' maxima) is not strictly below the root. Inside a bucket a
// second bound with table 1's value skips the remaining gathers. Bounds add in the kernel's own
// order and rounding is monotone, so a skipped class can never beat the root. Classes are not
// visited by id, so ties are settled by heap_offer's (value, id) order.
constexpr int64_t kFirstBuckets = 32;

template <typename scalar_t, typename acc_t>
void visit_bucket(const scalar_t* src, int64_t table_stride, int64_t r, const FirstTableInverse& inv, int32_t bucket,
                  const acc_t* row_max, int64_t k, scalar_t* vals, int64_t* ids, int64_t& size) {
  const acc_t v0 = static_cast<acc_t>(src[bucket]);
  if (size == k &&
      static_cast<acc_t>(static_cast<scalar_t>(mean_bound(v0, row_max, r))) < static_cast<acc_t>(vals[0])) {
    return;
  }
  for (int64_t e = inv.offsets[bucket]; e < inv.offsets[bucket + 1]; ++e) {
    const int32_t* trow = inv.rows.data() + e * r;
    if (size == k && r > 2) {
      const acc_t v1 = static_cast<acc_t>(src[table_stride + trow[1]]);
      const scalar_t bound = static_cast<scalar_t>(mean_bound2(v0, v1, row_max, r));
      if (static_cast<acc_t>(bound) < static_cast<acc_t>(vals[0])) continue;
    }
    const scalar_t v =
        static_cast<scalar_t>(merge_score<scalar_t, acc_t>(src, table_stride, trow, nullptr, r, kReduceMean));
    heap_offer(vals, ids, size, k, v, static_cast<int64_t>(inv.members[e]));
  }
}

template <typename scalar_t, typename acc_t>
void topk_row_by_first_table(const scalar_t* src, int64_t table_stride, int64_t r, int64_t nb,
                             const FirstTableInverse& inv, const acc_t* row_max, int64_t k, scalar_t* vals,
                             int64_t* ids, std::vector<int32_t>& order) {
  order.resize(nb);
  for (int64_t b = 0; b < nb; ++b) order[b] = static_cast<int32_t>(b);
  const auto higher = [src](int32_t a, int32_t b) {
    const acc_t va = static_cast<acc_t>(src[a]), vb = static_cast<acc_t>(src[b]);
    return va > vb || (va == vb && a < b);
  };
  const int64_t first = std::min(nb, kFirstBuckets);
  std::nth_element(order.begin(), order.begin() + (first - 1), order.end(), higher);
  std::sort(order.begin(), order.begin() + first, higher);
  int64_t size = 0;
  for (int64_t pos = 0; pos < nb; ++pos) {
    visit_bucket<scalar_t, acc_t>(src, table_stride, r, inv, order[pos], row_max, k, vals, ids, size);
  }
}

}  // namespace

static std::tuple<at::Tensor, at::Tensor> bucket_merge_topk_cpu(const at::Tensor& logp, const at::Tensor& table,
                                                                int64_t k, c10::string_view reduce_name) {
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  at::Tensor values, indices;
  std::tie(values, indices) = alloc_topk(a, k);
  if (values.numel() == 0) return {values, indices};
  const int32_t* t = tb.const_data_ptr<int32_t>();
  // The mean visits classes by table-0 bucket value (pruned); the median scans classes in order.
  const FirstTableInverse inv = reduce == kReduceMean ? invert_first_table(t, p, r, nb) : FirstTableInverse{};
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* src = lp.const_data_ptr<scalar_t>();
    scalar_t* vals = values.data_ptr<scalar_t>();
    int64_t* ids = indices.data_ptr<int64_t>();
    at::parallel_for(0, n_rows, row_grain(p * r), [&](int64_t begin, int64_t end) {
      // The heaps live in the output rows; per thread R maxima and B bucket ids.
      std::vector<acc_t> maxima(r);
      std::vector<int32_t> order;
      for (int64_t n = begin; n < end; ++n) {
        const scalar_t* row = src + n * nb;
        if (reduce == kReduceMean && row_maxima<scalar_t, acc_t>(row, n_rows * nb, r, nb, maxima.data())) {
          topk_row_by_first_table<scalar_t, acc_t>(row, n_rows * nb, r, nb, inv, maxima.data(), k, vals + n * k,
                                                   ids + n * k, order);
        } else {  // median, or a row holding NaN (NaN ranks first, so no bound applies): scan every class
          int64_t size = 0;
          merge_topk_range<scalar_t, acc_t>(row, n_rows * nb, t, r, reduce, 0, p, nullptr, k, vals + n * k, ids + n * k,
                                            size);
        }
        heap_to_sorted(vals + n * k, ids + n * k, k);
      }
    });
  });
  return {values, indices};
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("bucket_merge", &bucket_merge_cpu);
  m.impl("bucket_merge_topk", &bucket_merge_topk_cpu);
}

}  // namespace fedkernels
