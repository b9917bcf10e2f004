// CPU launchers of bucket_merge (rows in parallel, classes in chunks so a chunk of the table stays
// in cache while a small block of rows reuses it) and of its backward (count_sketch's row scatter
// with every sign +1, divided by R). bucket_merge_topk's launcher is merge_topk_cpu.cpp.

#include <algorithm>

#include "common/stable/alloc.h"
#include "common/stable/dispatch.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

namespace {
constexpr int64_t kClassChunk = 4096;  // 4096 * R int32 of table: L1/L2 resident
constexpr int64_t kRowBlock = 4;       // rows sharing one table chunk; their logp rows fit in L2
}  // namespace

static Tensor bucket_merge_cpu(const Tensor& logp, const Tensor& table, std::string reduce_name) {
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  Tensor out = empty_on(lp, {n_rows, p});
  if (out.numel() == 0) return out;
  const int32_t* t = tb.const_data_ptr<int32_t>();
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    const scalar_t* src = lp.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, n_rows, merge_row_grain(p * r), [&](int64_t begin, int64_t end) {
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

static Tensor bucket_merge_backward_cpu(const Tensor& grad, const Tensor& table, int64_t num_buckets) {
  check_merge_backward_args(grad, table, num_buckets);
  const Tensor tb = contiguous_or_self(table);
  const int64_t n_rows = grad.size(0), r = tb.size(1);
  Tensor out = empty_on(grad, {r, n_rows, num_buckets});
  if (out.numel() == 0) return out;
  count_sketch_rows_cpu(contiguous_or_self(grad), tb, nullptr, num_buckets, out, num_buckets, n_rows * num_buckets,
                        static_cast<double>(r));
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("bucket_merge", TORCH_BOX(&bucket_merge_cpu));
  m.impl("bucket_merge_backward", TORCH_BOX(&bucket_merge_backward_cpu));
}

}  // namespace fedkernels
