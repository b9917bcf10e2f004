// CPU launchers of the sampler and of scatter_rows_mean: at::parallel_for over clients / rows.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/dispatch.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

// Rows of m sorted negatives per client; client c draws with key(c).
template <typename KeyFn>
static at::Tensor sample_rows_cpu(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_classes,
                                  int64_t m, KeyFn key) {
  const auto index = build_complement_index(indptr, indices, num_classes, m);
  const int64_t c = indptr.numel() - 1;
  auto out = at::empty({c, m}, indices.options());
  const int64_t* uptr = index.uptr.data_ptr<int64_t>();
  const int64_t* shifted = index.shifted.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  // Each client owns its output row and its scratch set, so clients run in parallel.
  at::parallel_for(0, c, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots(sampler_capacity(m));
    for (int64_t i = begin; i < end; ++i) {
      int64_t* row = o + i * m;
      sample_complement(key(i), num_classes, shifted + uptr[i], uptr[i + 1] - uptr[i], m, slots.data(), row);
      std::sort(row, row + m);
    }
  });
  return out;
}

static at::Tensor sample_negatives_cpu(const at::Tensor& positives, int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_args(positives, num_classes, m);
  const auto indptr = at::tensor({int64_t(0), positives.numel()}, positives.options());
  const uint64_t key = static_cast<uint64_t>(seed);
  return sample_rows_cpu(indptr, positives.contiguous(), num_classes, m, [key](int64_t) { return key; })
      .reshape({m});
}

static at::Tensor sample_negatives_batched_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                               int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_batched_args(indptr, indices, num_classes, m);
  const uint64_t base = static_cast<uint64_t>(seed);
  return sample_rows_cpu(indptr.contiguous(), indices.contiguous(), num_classes, m,
                         [base](int64_t c) { return client_seed(base, static_cast<uint64_t>(c)); });
}

static void scatter_rows_mean_cpu(at::Tensor& out, const at::Tensor& idx, const at::Tensor& src,
                                         const at::Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const auto segs = build_row_segments(idx.contiguous());
  const auto source = src.contiguous();
  const int64_t d = out.size(1), num_rows = segs.rows.numel();
  const int64_t* perm = segs.perm.data_ptr<int64_t>();
  const int64_t* rows = segs.rows.data_ptr<int64_t>();
  const int64_t* seg = segs.seg.data_ptr<int64_t>();
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto w_acc = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    const acc_t* w = w_acc.data_ptr<acc_t>();
    // Every row's weight sum first, so a zero-weight row is reported before out is touched.
    std::vector<acc_t> wsum(num_rows);
    for (int64_t u = 0; u < num_rows; ++u) {
      acc_t s = 0;
      for (int64_t t = seg[u]; t < seg[u + 1]; ++t) s += w[perm[t]];
      TORCH_CHECK_VALUE(s > 0, "weight of the sources of row ", rows[u], " sums to 0: its mean is undefined");
      wsum[u] = s;
    }
    const scalar_t* s_ptr = source.data_ptr<scalar_t>();
    scalar_t* o_ptr = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d));
    // Each output row is one segment: rows run in parallel, sources within a row in stable order.
    at::parallel_for(0, num_rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(d);
      for (int64_t u = begin; u < end; ++u) {
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t t = seg[u]; t < seg[u + 1]; ++t) {
          weighted_row_accumulate(acc.data(), s_ptr + perm[t] * d, w[perm[t]], d, 0, 1);
        }
        weighted_row_finish(o_ptr + rows[u] * d, acc.data(), wsum[u], d, 0, 1);
      }
    });
  });
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("sample_negatives", &sample_negatives_cpu);
  m.impl("sample_negatives_batched", &sample_negatives_batched_cpu);
  m.impl("scatter_rows_mean", &scatter_rows_mean_cpu);
}

}  // namespace fedkernels
