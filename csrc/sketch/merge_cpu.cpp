// CPU launchers of bucket_merge and bucket_merge_topk: rows in parallel, classes in chunks so a
// chunk of the table stays in cache while a small block of rows reuses it.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/dispatch.h"
#include "sketch/sketch.h"
#include "sketch/sketch_checks.h"

namespace fedkernels {

namespace {
constexpr int64_t kClassChunk = 4096;  // 4096 * R int32 of table: L1/L2 resident
constexpr int64_t kRowBlock = 4;       // rows sharing one table chunk; their logp rows fit in L2

int64_t row_grain(int64_t work_per_row) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_row)); }
}  // namespace

static at::Tensor bucket_merge_cpu(const at::Tensor& logp, const at::Tensor& table, c10::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name);
  check_merge_args(logp, table, reduce);
  const auto lp = logp.contiguous();
  const auto tb = table.contiguous();
  const int64_t r = lp.size(0), n_rows = lp.size(1), nb = lp.size(2), p = tb.size(0);
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

static std::tuple<at::Tensor, at::Tensor> bucket_merge_topk_cpu(const at::Tensor& logp, const at::Tensor& table,
                                                                int64_t k, c10::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name);
  check_merge_args(logp, table, reduce);
  check_topk_k(k, table.size(0));
  const auto lp = logp.contiguous();
  const auto tb = table.contiguous();
  const int64_t r = lp.size(0), n_rows = lp.size(1), nb = lp.size(2), p = tb.size(0);
  auto values = at::empty({n_rows, k}, lp.options());
  auto indices = at::empty({n_rows, k}, lp.options().dtype(at::kLong));
  if (values.numel() == 0) return {values, indices};
  const int32_t* t = tb.const_data_ptr<int32_t>();
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* src = lp.const_data_ptr<scalar_t>();
    scalar_t* vals = values.data_ptr<scalar_t>();
    int64_t* ids = indices.data_ptr<int64_t>();
    at::parallel_for(0, n_rows, row_grain(p * r), [&](int64_t begin, int64_t end) {
      // The heaps live in the output rows; per thread only R maxima and a size per row: O(N k) in all.
      std::vector<acc_t> maxima(kRowBlock * r);
      int64_t sizes[kRowBlock];
      bool prune[kRowBlock];
      for (int64_t n0 = begin; n0 < end; n0 += kRowBlock) {
        const int64_t n1 = std::min(end, n0 + kRowBlock);
        for (int64_t n = n0; n < n1; ++n) {
          sizes[n - n0] = 0;
          prune[n - n0] = reduce == kReduceMean &&
                          row_maxima<scalar_t, acc_t>(src + n * nb, n_rows * nb, r, nb, maxima.data() + (n - n0) * r);
        }
        for (int64_t c0 = 0; c0 < p; c0 += kClassChunk) {
          const int64_t c1 = std::min(p, c0 + kClassChunk);
          for (int64_t n = n0; n < n1; ++n) {
            merge_topk_range<scalar_t, acc_t>(src + n * nb, n_rows * nb, t, r, reduce, c0, c1,
                                              prune[n - n0] ? maxima.data() + (n - n0) * r : nullptr, k,
                                              vals + n * k, ids + n * k, sizes[n - n0]);
          }
        }
        for (int64_t n = n0; n < n1; ++n) heap_to_sorted(vals + n * k, ids + n * k, k);
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
