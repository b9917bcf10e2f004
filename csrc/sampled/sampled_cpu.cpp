// CPU launchers of the sampler: torch's parallel_for over clients (scatter_rows_mean_cpu.cpp has the row scatter).
#include <algorithm>
#include <vector>

#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/sampled_prep.h"

namespace fedkernels {

// Rows of m sorted negatives per client; client c draws with key(c).
template <typename KeyFn>
static Tensor sample_rows_cpu(const Tensor& indptr, const Tensor& indices, int64_t num_classes, int64_t m, KeyFn key) {
  const auto index = build_complement_index_host(indptr, indices, num_classes, m);
  const int64_t c = indptr.numel() - 1;
  Tensor out = empty_on(indices, {c, m});
  const int64_t* uptr = index.uptr.const_data_ptr<int64_t>();
  const int64_t* shifted = index.shifted.const_data_ptr<int64_t>();
  int64_t* o = out.mutable_data_ptr<int64_t>();
  // Each client owns its output row and its scratch set, so clients run in parallel.
  torch::stable::parallel_for(0, c, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots(sampler_capacity(m));
    for (int64_t i = begin; i < end; ++i) {
      int64_t* row = o + i * m;
      sample_complement(key(i), num_classes, shifted + uptr[i], uptr[i + 1] - uptr[i], m, slots.data(), row);
      std::sort(row, row + m);
    }
  });
  return out;
}

static Tensor sample_negatives_cpu(const Tensor& positives, int64_t num_classes, int64_t m, int64_t seed) {
  check_sample_negatives_args(positives, num_classes, m);
  const Tensor indptr = long_tensor({0, positives.numel()}, positives);
  const uint64_t key = static_cast<uint64_t>(seed);
  return torch::stable::reshape(
      sample_rows_cpu(indptr, contiguous_or_self(positives), num_classes, m, [key](int64_t) { return key; }), {m});
}

static Tensor sample_negatives_batched_cpu(const Tensor& indptr, const Tensor& indices, int64_t num_classes, int64_t m,
                                           int64_t seed) {
  check_sample_negatives_batched_args(indptr, indices, num_classes, m);
  const uint64_t base = static_cast<uint64_t>(seed);
  return sample_rows_cpu(contiguous_or_self(indptr), contiguous_or_self(indices), num_classes, m,
                         [base](int64_t c) { return client_seed(base, static_cast<uint64_t>(c)); });
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("sample_negatives", TORCH_BOX(&sample_negatives_cpu));
  m.impl("sample_negatives_batched", TORCH_BOX(&sample_negatives_batched_cpu));
}

}  // namespace fedkernels
