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

// The stable sort of sources by row: positions t ordered by (idx[t], t). The pairs are distinct, so
// any sort gives this one order; when they fit, they are packed into one uint64 key (faster to sort).
static void stable_row_order(const int64_t* idx, int64_t t_count, int64_t n, std::vector<int64_t>& perm) {
  perm.resize(t_count);
  int t_bits = 1;
  while ((int64_t(1) << t_bits) < t_count) ++t_bits;
  int n_bits = 1;
  while ((int64_t(1) << n_bits) < n) ++n_bits;
  if (t_bits + n_bits <= 64) {
    std::vector<uint64_t> keys(t_count);
    for (int64_t t = 0; t < t_count; ++t) keys[t] = (static_cast<uint64_t>(idx[t]) << t_bits) | uint64_t(t);
    std::sort(keys.begin(), keys.end());
    const uint64_t mask = (uint64_t(1) << t_bits) - 1;
    for (int64_t t = 0; t < t_count; ++t) perm[t] = static_cast<int64_t>(keys[t] & mask);
    return;
  }
  for (int64_t t = 0; t < t_count; ++t) perm[t] = t;
  std::sort(perm.begin(), perm.end(), [idx](int64_t a, int64_t b) { return idx[a] != idx[b] ? idx[a] < idx[b] : a < b; });
}

static void scatter_rows_mean_cpu(at::Tensor& out, const at::Tensor& idx, const at::Tensor& src,
                                  const at::Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const auto ix = idx.contiguous();
  const auto source = src.contiguous();
  const int64_t d = out.size(1), t_count = ix.numel();
  const int64_t* id = ix.data_ptr<int64_t>();
  std::vector<int64_t> perm, seg{0};
  stable_row_order(id, t_count, out.size(0), perm);
  for (int64_t t = 1; t < t_count; ++t) {
    if (id[perm[t]] != id[perm[t - 1]]) seg.push_back(t);
  }
  seg.push_back(t_count);
  const int64_t num_rows = static_cast<int64_t>(seg.size()) - 1;
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto w_acc = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    const acc_t* w = w_acc.data_ptr<acc_t>();
    // Every row's weight sum first, so a zero-weight row is reported before out is touched.
    std::vector<acc_t> wsum(num_rows);
    for (int64_t u = 0; u < num_rows; ++u) {
      acc_t s = 0;
      for (int64_t t = seg[u]; t < seg[u + 1]; ++t) s += w[perm[t]];
      TORCH_CHECK_VALUE(s > 0, "weight of the sources of row ", id[perm[seg[u]]],
                        " sums to 0: its mean is undefined");
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
        weighted_row_finish(o_ptr + id[perm[seg[u]]] * d, acc.data(), wsum[u], d, 0, 1);
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
