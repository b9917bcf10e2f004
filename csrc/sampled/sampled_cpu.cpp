// CPU launchers of the sampler: at::parallel_for over clients (scatter_rows_mean_cpu.cpp has the row scatter).
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <vector>

#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

// Rows of m sorted negatives per client; client c draws with key(c).
template <typename KeyFn>
static at::Tensor sample_rows_cpu(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_classes, int64_t m,
                                  KeyFn key) {
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
  return sample_rows_cpu(indptr, positives.contiguous(), num_classes, m, [key](int64_t) { return key; }).reshape({m});
}

static at::Tensor sample_negatives_batched_cpu(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_classes,
                                               int64_t m, int64_t seed) {
  check_sample_negatives_batched_args(indptr, indices, num_classes, m);
  const uint64_t base = static_cast<uint64_t>(seed);
  return sample_rows_cpu(indptr.contiguous(), indices.contiguous(), num_classes, m,
                         [base](int64_t c) { return client_seed(base, static_cast<uint64_t>(c)); });
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("sample_negatives", &sample_negatives_cpu);
  m.impl("sample_negatives_batched", &sample_negatives_batched_cpu);
}

}  // namespace fedkernels
